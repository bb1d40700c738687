"""The task runtime: the queue in the database, one episode per leased phone, the controls a client
sends a running task (cancel, pause, takeover), the event stream, and what replicas share."""
