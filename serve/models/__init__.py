"""The model lifecycle: which version and engine serve a task (the router), the evaluation gate,
the promotion of candidates, and the hot swaps into vLLM or the in-process engine."""
