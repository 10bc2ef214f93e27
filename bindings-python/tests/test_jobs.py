"""Jobs (the AWS IoT Jobs MQTT API) through mqstore serve: the operator calls and the device
side, from both clients."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import mqstore
import pytest
from harness import Server
from mqstore import errors


def test_a_job_from_creation_to_success(client: mqstore.Client, key: str) -> None:
    thing = "py-thing-" + key.rsplit("_", 1)[-1]
    job = "py-job-" + key.rsplit("_", 1)[-1]
    device = client.jobs(thing)
    assert device.thing == thing
    assert device.pending() == {"inProgressJobs": [], "queuedJobs": []}

    client.create_job(job, [thing], {"operation": "reboot"}, max_retries=1)
    notification = device.next_notification(timeout=10)
    assert notification is not None and notification["kind"] in ("notify", "notify-next")
    pending = device.pending()
    assert [j["jobId"] for j in pending["queuedJobs"]] == [job]
    described = client.describe_job(job)
    assert described["jobId"] == job
    assert described["jobArn"] == f"arn:aws:iot:mqstore:000000000000:job/{job}"
    assert job in [j["jobId"] for j in client.list_jobs()]

    started = device.start_next(status_details={"step": "downloading"}, step_timeout=120)
    assert started is not None
    assert started["jobId"] == job and started["status"] == "IN_PROGRESS"
    assert started["jobDocument"] == {"operation": "reboot"}
    assert started["statusDetails"] == {"step": "downloading"}
    assert device.describe(job)["status"] == "IN_PROGRESS"

    with pytest.raises(errors.JobsError) as stale:
        device.update(job, status="SUCCEEDED", expected_version=999)
    assert stale.value.jobs_code == "VersionMismatch"
    accepted = device.update(job, status="SUCCEEDED", include_state=True)
    assert accepted["executionState"]["status"] == "SUCCEEDED"
    assert client.describe_job_execution(job, thing)["status"] == "SUCCEEDED"
    assert device.describe_next() is None
    assert device.start_next() is None
    listed = client.list_job_executions(thing=thing, status="SUCCEEDED")
    assert [e["jobId"] for e in listed] == [job]
    client.delete_job_execution(job, thing)
    with pytest.raises(errors.JobsError) as gone:
        client.describe_job_execution(job, thing)
    assert gone.value.jobs_code == "ResourceNotFound"


def test_jobs_refusals_and_bad_arguments(client: mqstore.Client) -> None:
    with pytest.raises(errors.JobsError) as bad:
        client.create_job("bad id with spaces", ["t"], {})
    assert bad.value.jobs_code == "InvalidRequest" and bad.value.code == 212
    with pytest.raises(errors.JobsError):
        client.cancel_job("py-no-such-job")
    with pytest.raises(TypeError, match="the job document must be a dict"):
        client.create_job("j", ["t"], ["not", "a", "dict"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="JSON-serializable"):
        client.create_job("j", ["t"], {"when": object()})
    with pytest.raises(TypeError, match="targets must be a list of str"):
        client.create_job("j", "thing", {})
    with pytest.raises(ValueError, match="unknown job execution status"):
        client.list_job_executions(status="DONE")
    with pytest.raises(ValueError, match="max_retries must not be negative"):
        client.create_job("j", ["t"], {}, max_retries=-1)


def test_jobs_from_asyncio(server: Server, key: str) -> None:
    thing = "py-async-thing"
    job = "py-async-job"

    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            device = await c.jobs(thing)
            await c.create_job(job, [thing], {"v": 1})
            notifications = device.__aiter__()
            first = await asyncio.wait_for(notifications.__anext__(), 10)
            assert first["kind"] in ("notify", "notify-next")
            started = await device.start_next()
            assert started is not None and started["jobId"] == job
            await device.update(job, status="FAILED", status_details={"why": "battery"})
            execution = await c.describe_job_execution(job, thing)
            assert execution["status"] == "FAILED"
            assert [j["jobId"] for j in await c.list_jobs() if j["jobId"] == job] == [job]
            assert (await c.describe_job(job))["executions"] == {"FAILED": 1}
            # A queued execution is canceled with its job.
            await c.create_job(job + "-2", [thing], {"v": 2})
            await c.cancel_job(job + "-2")
            assert (await c.describe_job(job + "-2"))["executions"] == {"CANCELED": 1}

    asyncio.run(main())


def test_a_rollout_its_abort_and_the_job_s_lifecycle(client: mqstore.Client, key: str) -> None:
    tag = key.rsplit("_", 1)[-1]
    things = [f"py-roll-{tag}-{i}" for i in range(4)]
    job = "py-roll-" + tag
    abort = {
        "failureType": "FAILED",
        "action": "CANCEL",
        "thresholdPercentage": 50,
        "minNumberOfExecutedThings": 2,
    }
    client.create_job(
        job, things, {"v": 1}, max_per_minute=500, abort=[abort], description="canary"
    )
    described = client.describe_job(job)
    assert described["description"] == "canary"
    assert described["jobExecutionsRolloutConfig"] == {"maximumPerMinute": 500}
    assert described["rollout"]["totalThings"] == 4
    client.update_job(job, description="wider", max_per_minute=1000)
    assert client.describe_job(job)["jobExecutionsRolloutConfig"]["maximumPerMinute"] == 1000

    # One thing's execution canceled; expectedVersion is checked.
    with pytest.raises(errors.JobsError) as conflict:
        client.cancel_job_execution(job, things[0], expected_version=9)
    assert conflict.value.jobs_code == "VersionConflict"
    client.cancel_job_execution(job, things[0], status_details={"why": "bench"})
    assert client.describe_job_execution(job, things[0])["status"] == "CANCELED"

    # Wait for the rate to reach the rest (500 a minute: within a second).
    for _ in range(100):
        if client.describe_job(job)["rollout"]["notifiedThings"] == 4:
            break
        time.sleep(0.05)
    # Two of two executed things failed: 100 % ≥ 50 %, the job is aborted.
    for thing in things[1:3]:
        client.jobs(thing).update(job, status="FAILED")
    described = client.describe_job(job)
    assert described["status"] == "CANCELED"
    assert described["reasonCode"] == "ABORT_CRITERIA_MET"
    assert described["jobProcessDetails"]["numberOfFailedThings"] == 2
    assert client.describe_job_execution(job, things[3])["status"] == "CANCELED"

    page = client.list_jobs_page(status="CANCELED", max_results=250)
    assert job in [j["jobId"] for j in page["jobs"]]
    executions = client.list_job_executions_page(job_id=job, max_results=3)
    assert len(executions["executions"]) == 3 and executions["nextToken"] is not None
    rest = client.list_job_executions_page(job_id=job, next_token=executions["nextToken"])
    assert [e["thingName"] for e in rest["executions"]] == [things[3]]

    with pytest.raises(errors.JobsError) as refused:
        client.jobs_operate({"op": "updateJob", "jobId": job, "description": "late"})
    assert refused.value.jobs_code == "InvalidStateTransition"
    client.delete_job(job)
    with pytest.raises(errors.JobsError) as gone:
        client.describe_job(job)
    assert gone.value.jobs_code == "ResourceNotFound"


def test_shorthands_and_aws_fields_make_one_request(client: mqstore.Client, key: str) -> None:
    job = f"py-short-{key.rsplit('_', 1)[-1]}"
    client.jobs_operate(
        {"op": "createJob", "jobId": job, "targets": ["t"], "document": {}, "maxRetries": 2}
    )
    described = client.describe_job(job)
    assert described.get("jobExecutionsRetryConfig") == {
        "criteriaList": [{"failureType": "ALL", "numberOfRetries": 2}]
    }
    client.update_job(job, in_progress_timeout_minutes=3, max_per_minute=9)
    described = client.describe_job(job)
    assert described.get("timeoutConfig") == {"inProgressTimeoutInMinutes": 3}
    assert described.get("jobExecutionsRolloutConfig") == {"maximumPerMinute": 9}
    client.cancel_job(job)
    client.delete_job(job)


def test_bad_rollout_settings_change_nothing(client: mqstore.Client) -> None:
    with pytest.raises(errors.JobsError) as bad:
        client.create_job("py-bad-rate", ["t"], {}, max_per_minute=5000)
    assert bad.value.jobs_code == "InvalidRequest" and "maximumPerMinute" in str(bad.value)
    with pytest.raises(errors.JobsError) as unknown:
        client.create_job("py-bad-abort", ["t"], {}, abort=[{"failureType": "SOMETIMES"}])
    assert unknown.value.jobs_code == "InvalidRequest" and "SOMETIMES" in str(unknown.value)
    with pytest.raises(ValueError, match="fits no operator call"):
        client.jobs_operate({"op": "dropTables"})
    with pytest.raises(ValueError, match="give max_per_minute or rollout, not both"):
        client.create_job("j", ["t"], {}, max_per_minute=1, rollout={"maximumPerMinute": 1})
    with pytest.raises(ValueError, match='needs "op"'):
        client.jobs_operate({"jobId": "x"})
    with pytest.raises(ValueError, match="give retry or jobExecutionsRetryConfig, not both"):
        client.jobs_operate({"op": "createJob", "retry": [], "jobExecutionsRetryConfig": {}})
    with pytest.raises(ValueError, match="targets must be a list"):
        client.jobs_operate({"op": "createJob", "jobId": "j", "targets": "t", "document": {}})
    with pytest.raises(errors.JobsError) as gone:
        client.describe_job("py-bad-rate")
    assert gone.value.jobs_code == "ResourceNotFound"


def test_groups_templates_and_schedules(client: mqstore.Client, key: str) -> None:
    suffix = key.rsplit("_", 1)[-1]
    group, template = "py-group-" + suffix, "py-tpl-" + suffix
    things = [f"py-member-{suffix}-{i}" for i in range(3)]
    created = client.create_thing_group(group, description="the lab")
    assert created["thingGroupArn"].endswith(":thinggroup/" + group)
    with pytest.raises(errors.JobsError) as exists:
        client.create_thing_group(group)
    assert exists.value.jobs_code == "ResourceAlreadyExists"
    for thing in things:
        client.add_thing_to_thing_group(group, thing)
    first = client.list_things_in_thing_group(group, max_results=2)
    assert first["things"] == things[:2]
    rest = client.list_things_in_thing_group(group, next_token=first["nextToken"])
    assert rest["things"] == things[2:] and "nextToken" not in rest
    assert client.describe_thing_group(group)["thingGroupProperties"] == {
        "thingGroupDescription": "the lab"
    }
    assert group in [g["groupName"] for g in client.list_thing_groups()["thingGroups"]]

    arn = client.create_job_template(
        template,
        {"url": "https://fw.example/${aws:iot:parameter:version}.bin"},
        description="firmware",
        in_progress_timeout_minutes=30,
    )
    assert arn.endswith(":jobtemplate/" + template)
    assert client.describe_job_template(template)["description"] == "firmware"
    listed = client.list_job_templates()["jobTemplates"]
    assert template in [t["jobTemplateId"] for t in listed]

    job = "py-cont-" + suffix
    client.create_job(
        job,
        ["thinggroup/" + group],
        template=template,
        parameters={"version": "3.1"},
        continuous=True,
    )
    described = client.describe_job(job)
    assert described["document"] == {"url": "https://fw.example/3.1.bin"}
    assert described["targetSelection"] == "CONTINUOUS"
    assert described["timeoutConfig"] == {"inProgressTimeoutInMinutes": 30}
    late = f"py-member-{suffix}-late"
    client.add_thing_to_thing_group(group, late)
    assert client.describe_job_execution(job, late)["status"] == "QUEUED"
    client.remove_thing_from_thing_group(group, things[0])
    assert client.describe_job_execution(job, things[0])["status"] == "REMOVED"
    with pytest.raises(errors.JobsError) as unfilled:
        client.create_job(job + "-x", ["t"], template=template)
    assert unfilled.value.jobs_code == "InvalidRequest" and '"version"' in str(unfilled.value)
    with pytest.raises(ValueError, match="a template"):
        client.create_job(job + "-y", ["t"])

    scheduled = "py-sched-" + suffix
    client.create_job(
        scheduled,
        [things[1]],
        {},
        scheduling={
            "startTime": "2099-01-01T00:00",
            "maintenanceWindows": [{"startTime": "cron(0 2 ? * SAT *)", "durationInMinutes": 60}],
        },
    )
    assert client.describe_job(scheduled)["status"] == "SCHEDULED"
    with pytest.raises(errors.JobsError) as never:
        client.create_job(
            scheduled + "-never",
            ["t"],
            {},
            scheduling={
                "maintenanceWindows": [{"startTime": "cron(0 0 30 2 ? *)", "durationInMinutes": 30}]
            },
        )
    assert never.value.jobs_code == "InvalidRequest" and "never fires" in str(never.value)
    client.cancel_job(job)
    client.cancel_job(scheduled)
    client.delete_job_template(template)
    client.delete_thing_group(group)
    with pytest.raises(errors.JobsError) as gone:
        client.describe_thing_group(group)
    assert gone.value.jobs_code == "ResourceNotFound"


def test_groups_from_asyncio(server: Server, key: str) -> None:
    suffix = key.rsplit("_", 1)[-1]

    async def main() -> None:
        async with mqstore.AsyncClient("127.0.0.1", server.broker.port) as c:
            group = "py-agroup-" + suffix
            await c.create_thing_group(group)
            await c.add_thing_to_thing_group(group, "py-athing-" + suffix)
            page = await c.list_things_in_thing_group(group)
            assert page["things"] == ["py-athing-" + suffix]
            await c.create_job_template("py-atpl-" + suffix, {"v": 1})
            assert (await c.list_job_templates(max_results=250))["jobTemplates"]
            await c.remove_thing_from_thing_group(group, "py-athing-" + suffix)
            await c.delete_job_template("py-atpl-" + suffix)
            await c.delete_thing_group(group)

    asyncio.run(main())


# Doubles serde_json's default parser reads one unit in the last place off (about one double in
# ten written by Python's `repr`), and the extremes: the same file the Rust tests send.
NUMBERS = json.loads((Path(__file__).parents[2] / "testdata" / "numbers.json").read_text())


def test_numbers_in_job_documents_and_shadows_come_back_to_the_last_bit(
    client: mqstore.Client, key: str
) -> None:
    thing = "py-numbers-" + key.rsplit("_", 1)[-1]
    job = "py-numbers-job-" + key.rsplit("_", 1)[-1]
    client.create_job(job, [thing], {"n": NUMBERS})
    assert client.describe_job(job)["document"]["n"] == NUMBERS, "to the operator"
    started = client.jobs(thing).start_next()
    assert started is not None and started["jobDocument"]["n"] == NUMBERS, "to the device"
    shadow = client.shadow(thing)
    assert shadow.update({"reported": {"n": NUMBERS}})["state"]["reported"]["n"] == NUMBERS
    assert shadow.get()["state"]["reported"]["n"] == NUMBERS
