"""What a run needs in memory: the plan by part (:mod:`.plan`), the token budget chosen from it
(:mod:`.budget`), model shapes read without weights (:mod:`.shapes`) and the fake-tensor
counter that checks the plan (:mod:`.fake`)."""
