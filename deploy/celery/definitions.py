"""The example Definitions on Celery: runs start on the Dagster host (DefaultRunLauncher), each
step is a Celery task on a worker fleet (``celery_executor``). Needs ``pip install
'trident[celery]'`` on the Dagster host and on every worker; workers start with
``dagster-celery worker start -A dagster_celery.app -y deploy/celery/celery.yaml`` (see
deploy/README.md for what each process needs and how a lost step is redelivered or ends the run).

``CELERY_CONFIG`` is the same ``config_source`` as in celery.yaml (the workers read that file; a
test keeps the two equal)."""

from typing import Any

from dagster_celery import celery_executor

from trident_assets.definitions import build_definitions

# A step's task is acknowledged only when it has finished (task_acks_late), and handed back to the
# broker when the worker process running it dies (task_reject_on_worker_lost), so a lost step is
# redelivered to another worker instead of hanging the run. On Redis, a task whose whole worker
# died comes back after the visibility timeout: it must exceed the longest step, or a step still
# running is handed to a second worker. RabbitMQ redelivers when the worker's connection drops
# (its consumer_timeout, 30 min by default, must also exceed the longest step).
CELERY_CONFIG: dict[str, Any] = {
    "task_acks_late": True,
    "task_reject_on_worker_lost": True,
    "worker_prefetch_multiplier": 1,  # a worker holds no unstarted task another could run
    "broker_transport_options": {
        "visibility_timeout": 1800,  # seconds (Redis, SQS)
        "max_retries": 3,  # dagster-celery's defaults for publishing, kept
        "interval_start": 0,
        "interval_step": 0.2,
        "interval_max": 0.5,
    },
}

defs = build_definitions(
    executor=celery_executor.configured(
        {
            "broker": {"env": "TRIDENT_CELERY_BROKER_URL"},  # redis://... or amqp://...
            "backend": {"env": "TRIDENT_CELERY_BACKEND_URL"},
            "config_source": CELERY_CONFIG,
        }
    )
)
