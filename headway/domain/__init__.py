"""The pure rules, with no I/O and no dependency: tasks and reports (`domain.tasks`),
failure, durations, completion, estimates, jobs, share ids, the request and response
schemas, the error family and the clock. Import them from those modules: this package
loads nothing, so the client can use `domain.failure` and `domain.durations` alone."""
