"""``grpo-run import``: another framework's GRPO configuration as a commented grpo-run config.

:mod:`sources` reads the file, :mod:`translate` moves each setting through the peer tables
(:mod:`grpo_run.core.config.peer_tables`) and each framework's rules (:mod:`open_instruct`,
:mod:`roll`, :mod:`trl`), :mod:`writer` writes the TOML, :mod:`command` is the command.
"""
