"""Which of the fast traverser's speed-ups one select walk takes: one decision, made once.

Design: ``FastTraverser`` holds four speed-ups, each a file of its own:

- the root index (``root_index.py``): the root's candidates kept across matches, for
  the exhaustive policies with stable ties (fast mode);
- leaves scored in line (``inline_leaves.py``): the exhaustive walk's leaves worked out
  without their walk's calls;
- shape templates (``shape_templates.py``): an untouched subtree replayed from the
  walk of another of its shape;
- the first-match walk (``first_match_walk.py``): the first-match policies' leaves in
  line, and the children they turned down at once remembered.

Whether each applies depends only on the policy, the request and the graph, so the
walk decides it once, before it starts (:func:`decide`), into a frozen
:class:`Shortcuts`, and every part reads that record. The walk of the same match again
without any of them (``NONE``) is what runs when the root index cannot stand for a
match (an unbalanced node-centric walk, see ``root_index.IndexFallback``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache

from fluxnode.scheduler.policies.policy import Policy


@dataclass(frozen=True, slots=True)
class Shortcuts:
    """The speed-ups one select walk takes (True: it takes it)."""

    # the root's candidates from a kept RootIndex (exhaustive, stable ties, no
    # constraint, the root not a node, no slot at the root)
    root_index: bool
    # the exhaustive walk's leaves scored in line (_explore_cached)
    inline_leaves: bool
    # the first-match walk's leaves in line and its remembered prunes (_explore_first)
    first_match: bool
    # untouched subtrees replayed from templates (_dom_dfv_tpl)
    templates: bool


NONE = Shortcuts(root_index=False, inline_leaves=False, first_match=False, templates=False)


def decide(policy: Policy, constrained: bool, root_is_node: bool, root_slot: bool) -> Shortcuts:
    """The shortcuts a walk under ``policy`` takes.

    The walk's shortcuts (leaves in line, templates) give what the plain walk gives in
    either tie order; the root index only with stable ties. Constraints prune nodes by
    name, per job: none of them then. A slot at the root chooses its candidates all at
    once, by the plain walk: the root index, the exhaustive leaves in line and the
    templates are off below it (the first-match walk's leaves in line stay on)."""
    return _decide(policy.stop_on_1, policy.variation, policy.stable_ties, constrained,
                   root_is_node, root_slot)


@cache  # 64 combinations at most: one record each, made once
def _decide(stop_on_1: bool, variation: bool, stable_ties: bool, constrained: bool,
            root_is_node: bool, root_slot: bool) -> Shortcuts:
    exhaustive = not stop_on_1
    inline = exhaustive and not constrained and not root_is_node
    # the first-match policies' leaves in line (not variation: its leaves score by a
    # property; not with constraints, which prune nodes by name)
    first = stop_on_1 and not variation and not constrained
    got = Shortcuts(
        root_index=inline and stable_ties,
        inline_leaves=inline,
        first_match=first,
        # the exhaustive policies and the first-match ones (whose children's order, by
        # edge weight, is in the shapes)
        templates=inline or (first and not root_is_node),
    )
    if root_slot and (got.templates or got.root_index):
        return replace(got, root_index=False, inline_leaves=False, templates=False)
    return got
