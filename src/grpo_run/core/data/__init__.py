"""Prompt data: where rows come from (:mod:`.sources`), how each is checked (:mod:`.rows`) and
tokenised once (:mod:`.prompts`)."""
