"""Scaling out: steps run on more machines than one, behind the engine's runner seam (`planexec.engine.runner`).

`RayRunner` runs the steps that call a function tool on a Ray cluster and
every other step in the driver (see `planexec.scale.ray_runner`);
`runner_for` builds the runner that ``[planexec.runner]`` (a
`config.RunnerConfig`) asks for. Ray is an extra: ``pip install
'planexec[ray]'``. Imports `config`, `engine.runner` and `workers`.
"""

from planexec.scale.ray_runner import INSTALL_HINT, RayRunner, remote_ref, runner_for

__all__ = ["INSTALL_HINT", "RayRunner", "remote_ref", "runner_for"]
