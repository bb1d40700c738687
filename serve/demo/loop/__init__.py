"""``uis1 demo``: the product's loop on one machine, from a policy that fails to one that does not.

1. **Before**: a starter policy (a small model trained here on some simulated tasks) gets five
   tasks on simulated phones; each is checked on the phone and labelled.
2. **A person corrects**: each failed task runs again, held before every action. A stand-in for a
   person, who knows how each task is done (the simulated task's own solver), makes the calls the
   viewer's buttons make: it lets the model's action go while it is the right one, and from the
   first wrong one on supplies the action itself; then it labels the outcome.
3. **Retraining**: ``POST /v1/jobs`` runs the retraining job on the logged traffic (curate, train,
   evaluate, register a candidate), in a child process as the nightly job runs.
4. **Gate and hot swap**: the service gates the candidate against the serving version and swaps it
   into the running policy while requests keep coming (none may fail).
5. **After**: the same tasks again, and held-out instances of them (the held-out side of each
   task's split, ``devices.sim.tasks.splits``: the row to tap elsewhere, or another app named),
   with a before/after table and what the held-out rows show.

Everything goes through the real API, the real adb server and the real training code; only the
phones and the person are simulated, and the demo says so.

The package: ``setting`` (what runs, the starter model), ``run`` (the five acts), ``person`` (the
scripted person's corrections), ``watch`` (the request stream and the job's progress during
retraining and swap), ``report`` (the before/after table).
"""

from serve.demo.loop.run import run_loop
from serve.demo.loop.setting import LoopSetting, cache_dir, ensure_starter

__all__ = ["LoopSetting", "cache_dir", "ensure_starter", "run_loop"]
