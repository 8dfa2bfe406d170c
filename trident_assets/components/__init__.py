"""Trident's node factories as Dagster Components (``dg list components`` lists them, ``dg
scaffold defs`` creates one, a ``defs.yaml`` declares one): ``TransformNode``, ``JoinNode``,
``SplitNode``, ``ModelNode``. Each builds its node with the Python factory of the same kind."""

from .nodes import JoinNode, ModelNode, SplitNode, TransformNode

__all__ = ["JoinNode", "ModelNode", "SplitNode", "TransformNode"]
