"""The transaction id of a step's output: one id per (run, step, output, partition keys).

Dagster can run one step of one run more than once: Celery redelivers a step whose worker died
(``task_acks_late``), a ``RetryPolicy`` retries a failed step, in the same run. A first attempt
may have committed (or staged) before it died. Writing every attempt under the same id makes the
second one repeat the first instead of adding to it: the engine treats a committed id as a no-op
that returns the first commit, replaces a staged one and reopens an aborted one
(``TransactionDriver.open``), whatever the mode; an ``append`` or a ``delta`` increment is then
written once. A new run (a re-execution, a run retry) has a new run id and writes anew.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import dagster as dg
from dagster._core.errors import DagsterInvariantViolationError

# uuid5 namespace of step-output transaction ids (any fixed UUID; changing it would make a
# step re-run during an upgrade write twice)
STEP_TXN_NAMESPACE = uuid.UUID("5d0c3a8e-7f4e-4a59-9d55-2b1f3c6e8a10")


def step_txn_id(run_id: str, step_key: str, output_name: str, partition_keys: Sequence[str] = ()) -> uuid.UUID:
    """The transaction id every attempt of this step writes this output under (uuid5 of the four,
    separated by a character none of them holds)."""
    name = "\x1f".join([run_id, step_key, output_name, "\x1e".join(partition_keys)])
    return uuid.uuid5(STEP_TXN_NAMESPACE, name)


def output_txn_id(context: dg.OutputContext) -> uuid.UUID | None:
    """``step_txn_id`` of the output ``context`` handles; ``None`` for a context built outside a
    step (``build_output_context``), where every write gets a fresh id."""
    try:
        step_key, name = context.step_key, context.name
    except DagsterInvariantViolationError:
        return None
    keys = sorted(context.asset_partition_keys) if context.has_asset_partitions else []
    return step_txn_id(context.run_id, step_key, name, keys)


def asset_step_txn_id(context: dg.AssetExecutionContext, output_name: str) -> uuid.UUID:
    """``step_txn_id`` of output ``output_name`` of the step ``context`` executes (an asset that
    writes its own output, e.g. a checked asset staging and auditing it in its step): the id
    the IO manager would give it."""
    step = context.get_step_execution_context()
    partitioned = step.has_asset_partitions_for_output(output_name)
    keys = sorted(context.asset_partition_keys_for_output(output_name)) if partitioned else []
    return step_txn_id(context.run.run_id, step.step.key, output_name, keys)
