"""Where a run's engines and learner ranks live: ``[distributed] backend``.

* ``"local"`` (:mod:`.local`): engines in this process; learner ranks of a data-parallel
  strategy in child processes (:mod:`.processes`).
* ``"ray"`` (:mod:`.ray_backend`): every engine and learner rank is a Ray actor with its resource
  spec, optionally in one placement group.

Either way the loop talks to one engine-shaped object and one
:class:`~.learner_group.LearnerGroup`; weights and rollouts cross process boundaries as flat
buffers (:mod:`.flat`).
"""
