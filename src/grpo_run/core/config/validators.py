"""attrs validators shared by the config sections."""

from attrs import validators as v

positive = v.gt(0)
non_negative = v.ge(0)
