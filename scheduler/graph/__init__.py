"""The resource graph: vertices in a containment tree, with the planners each carries.

The readers build it, the traversers walk and update it, the writers describe it.
"""
