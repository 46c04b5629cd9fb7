"""Runs that are not worked where they were planned: the store's queue and the workers that take from it.

`worker` (`submit_plan` queues a plan as a run; `QueueWorker`, the loop of
``planexec worker``, takes queued runs and runs them), `local` (the worker
a face starts in a thread of its own for a single-machine setup) and
`saved` (the seam every plan not planned by a `Team` runs through: a plan
file, a template, a resumed or a queued run). The fleet is not a team: it
runs stored plans on the runner a run recorded, and a `Team` offers its
own worker (`Team.worker`) for the runs it submitted. Imports `engine`,
`store`, `workers`, `plan`, `scale`, `telemetry` and `config`.
"""
