"""Scaling out: steps run on more machines than one, behind the engine's runner seam (`planexec.engine.runner`).

`RayRunner` runs the steps that call a function tool on a Ray cluster and
every other step in the driver (`scale.ray_runner`; what a Ray worker runs
is `scale.remote`); `runner_for` builds the runner that
``[planexec.runner]`` (a `config.RunnerConfig`) asks for; `remote_ref`
says which tools' steps go to the cluster; `Runner` is the seam's protocol. `scale.cluster.TempRayCluster`
starts a throwaway cluster on loopback for tests and benchmarks. Ray is an
extra (``pip install 'planexec[ray]'``), imported only when a runner
connects. Imports `config`, `errors`, `engine.runner` and `workers`.
"""

from planexec.engine.runner import Runner
from planexec.scale.ray_runner import INSTALL_HINT, RayRunner, remote_ref, runner_for

__all__ = ["INSTALL_HINT", "RayRunner", "Runner", "remote_ref", "runner_for"]
