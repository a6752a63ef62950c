"""Matching: the depth-first traverser as Fluxion splits it.

`dfu` is the public API (match, cancel, info, find, grow); `dfu_impl` holds the state
the implementation shares, and `dfu_select` (test, prune, score, select), `dfu_update`
(emit planner spans, release) and `dfu_reservation` (when a request could start) the
implementation; `flexible` adds xor-slots, `find` the resource-query find language.
"""
