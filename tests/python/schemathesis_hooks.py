"""Schemathesis hooks (SCHEMATHESIS_HOOKS): a generated batch carries the checksum of its
own observations, which no schema can express, so that generated batches reach validation
and storage instead of all stopping at the checksum; its addresses, names and times are
made ones the schemathesis task accepts (its targets, the observation window), so that
some are stored and their answers checked against the schema too."""

import datetime
import hashlib
import json

import schemathesis

BATCHES = "/api/v1/scanner/executions/{execution_id}/batches"

# The task schemathesis.sh creates: its IP and domain targets.
TARGET_IP = "127.0.0.1"
TARGET_NAME = "scanstore.test"


def _in_scope(observation, now):
    """`observation` with its address, name and time within what the task accepts."""
    if not isinstance(observation, dict):
        return observation
    if "ip" in observation:
        observation["ip"] = TARGET_IP
    if observation.get("type") == "dns" and "name" in observation:
        observation["name"] = TARGET_NAME
    if "observed_at" in observation:
        observation["observed_at"] = now
    return observation


@schemathesis.hook
def before_call(ctx, case, kwargs):
    """Every phase's batches (generated, boundary and stateful alike), just before sending."""
    body = case.body
    if case.operation.path != BATCHES or not isinstance(body, dict):
        return
    observations = body.get("observations")
    if not isinstance(observations, list):
        return
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    body["observations"] = [_in_scope(o, now) for o in observations]
    # The body goes out as json.dumps writes it, and the observations array within it as
    # json.dumps writes the array alone: the bytes the checksum covers.
    text = json.dumps(body["observations"])
    body["checksum"] = "sha256:" + hashlib.sha256(text.encode()).hexdigest()
