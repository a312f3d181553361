"""The Box's production and the checks around it: stop production before a run, bring it back after
(and on the Box itself when the controller dies), and refuse a run on what the Box says first."""
