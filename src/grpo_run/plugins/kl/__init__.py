"""Built-in kl plugin (registered through the grpo_run entry point 'kl')."""

from __future__ import annotations

from grpo_run import Registrar, hookimpl
from grpo_run.plugins.kl.k1 import K1KL
from grpo_run.plugins.kl.k2 import K2KL
from grpo_run.plugins.kl.k3 import K3KL
from grpo_run.plugins.kl.low_var import LowVarKL


@hookimpl
def grpo_run_register_kl_estimators(register: Registrar) -> None:
    """Register the built-in KL estimators."""
    for estimator in (K1KL, K2KL, K3KL, LowVarKL):
        register(estimator)
