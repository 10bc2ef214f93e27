"""The blocking client. Every call releases the GIL while it waits and can be interrupted with
Ctrl-C (``KeyboardInterrupt``; a request already sent may still be applied)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Final, Optional

from . import _args, _native
from ._args import BytesLike, FencingToken, PathLike, Seconds
from ._jobs import CommandWatch, FanOut, Jobs, KeyspaceWatch
from ._native import Change, CommandReply, DeleteResult, Hlc, SetResult, Versioned
from ._shadow import Shadow
from .wire import (
    CommandDefinition,
    CommandRecord,
    ExecutionListing,
    ExecutionsPage,
    JobDescription,
    JobExecution,
    JobListing,
    JobsPage,
    JobTemplate,
    TemplatesPage,
    ThingGroupDescription,
    ThingGroupsPage,
    ThingsPage,
)

# Which form of the native calls this client makes (the blocking one): the calls below are
# the same text in both clients (scripts/unasync.py).
_AIO: Final = False


class Client:
    """A connection to an MQTT 5 broker with ``mqstore serve`` beside it.

    Connects at once (raising :class:`~mqstore.errors.BrokerUnreachableError` or
    :class:`~mqstore.errors.BrokerRefusedError` when it cannot). Use it as a context manager, or
    call :meth:`close`. One client may be shared by many threads; a child made by ``fork()``
    must connect its own.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 1883,
        *,
        client_id: Optional[str] = None,
        username: Optional[str] = None,
        password: Optional[str] = None,
        tls: bool = False,
        ca_file: Optional[PathLike] = None,
        cert_file: Optional[PathLike] = None,
        key_file: Optional[PathLike] = None,
        key_password: Optional[str] = None,
        timeout: Seconds = 10.0,
    ) -> None:
        settings = _args.ConnectArgs(
            host,
            port,
            client_id,
            username,
            password,
            tls,
            ca_file,
            cert_file,
            key_file,
            key_password,
            timeout,
        )
        self._native = settings.connect()

    @property
    def client_id(self) -> str:
        """The MQTT client id (generated when none was given)."""
        return self._native.client_id

    # --- the calls: scripts/unasync.py writes the blocking client's from these ------------

    def set(
        self,
        key: BytesLike,
        value: BytesLike,
        *,
        nx: bool = False,
        nex: bool = False,
        expires: Optional[Seconds] = None,
        persist: bool = False,
        fencing_token: Optional[FencingToken] = None,
    ) -> SetResult:
        """Sets ``key`` to ``value``.

        ``nx``: only if the key does not exist; ``nex``: only if it does not exist or already
        holds ``value`` (a lease's renewal). ``expires``: the key expires this many seconds (or
        this ``timedelta``) later. ``persist``: ask that the key be kept durably.
        ``fencing_token``: the token of the lease guarding the key. ``.applied`` is false when
        ``nx``/``nex`` did not hold.
        """
        return self._native.set(
            _args.key(key),
            _args.to_bytes(value, "value"),
            _args.condition(nx, nex),
            _args.optional_millis(expires, "expires"),
            bool(persist),
            _args.fencing_token(fencing_token),
            _AIO,
        )

    def get(self, key: BytesLike) -> Optional[Versioned]:
        """The value and version of ``key``, or ``None`` when it does not exist."""
        return self._native.get(_args.key(key), _AIO)

    def delete(
        self, key: BytesLike, *, fencing_token: Optional[FencingToken] = None
    ) -> DeleteResult:
        """Deletes ``key``; ``.deleted`` is false when it did not exist."""
        return self._native.delete(_args.key(key), _args.fencing_token(fencing_token), _AIO)

    def vdel(
        self, key: BytesLike, value: BytesLike, *, fencing_token: Optional[FencingToken] = None
    ) -> DeleteResult:
        """Deletes ``key`` only if it holds ``value`` (``.outcome`` is ``"value_mismatch"``
        when it holds another)."""
        return self._native.vdel(
            _args.key(key), _args.to_bytes(value, "value"), _args.fencing_token(fencing_token), _AIO
        )

    def scan(self, pattern: BytesLike = "*") -> Iterator[bytes]:
        """The keys matching ``pattern`` (``*``, ``?`` and ``[...]``), fetched page by page
        as the iterator is consumed."""
        pages = self._native.scan(_args.key(pattern, "pattern"))

        def keys() -> Iterator[bytes]:
            while True:
                page = pages.next_page(_AIO)
                if page is None:
                    return
                yield from page

        return keys()

    def unobserve(self, key: BytesLike) -> None:
        """Stops observing ``key``: every observation of it by this client ends."""
        self._native.unobserve(_args.key(key), _AIO)

    def lease(
        self, key: BytesLike, ttl: Seconds, *, wait: Optional[Seconds] = None
    ) -> Optional[Lease]:
        """Takes the lease on ``key`` for ``ttl`` seconds, renewed in the background until
        released. Tries once (``wait`` None or 0), or waits up to ``wait`` for the key to be
        free. ``None`` when someone else holds it."""
        native = self._native.lease(
            _args.key(key), _args.millis(ttl, "ttl"), _args.wait_millis(wait, "wait"), _AIO
        )
        return None if native is None else Lease(native)

    def lead(self, key: BytesLike, ttl: Seconds) -> Lease:
        """Leader election: waits until this client holds the lease on ``key``."""
        native = self._native.lead(_args.key(key), _args.millis(ttl, "ttl"), _AIO)
        return Lease(native)

    # --- jobs (AWS IoT Jobs): the operator side ------------------------------------------

    def create_job(
        self,
        job_id: str,
        targets: Sequence[str],
        document: Optional[Mapping[str, Any]] = None,
        *,
        in_progress_timeout_minutes: Optional[int] = None,
        max_retries: int = 0,
        description: Optional[str] = None,
        max_per_minute: Optional[int] = None,
        rollout: Optional[Mapping[str, Any]] = None,
        abort: Optional[Sequence[Mapping[str, Any]]] = None,
        retry: Optional[Sequence[Mapping[str, Any]]] = None,
        continuous: bool = False,
        scheduling: Optional[Mapping[str, Any]] = None,
        template: Optional[str] = None,
        parameters: Optional[Mapping[str, str]] = None,
    ) -> None:
        """Creates job ``job_id`` for the things in ``targets``, with ``document`` (a dict,
        at most 32 KiB as JSON). ``max_per_minute`` notifies at most that many things a
        minute; ``rollout`` is AWS's ``jobExecutionsRolloutConfig`` (for an exponential rate),
        ``abort`` AWS's ``abortConfig.criteriaList`` (``{"failureType": "FAILED", "action":
        "CANCEL", "thresholdPercentage": 10, "minNumberOfExecutedThings": 100}``), ``retry``
        AWS's ``jobExecutionsRetryConfig.criteriaList`` (instead of ``max_retries``).
        ``targets`` name things or groups (``"thinggroup/NAME"``; ``continuous``: things
        added to the group later get the job too); ``scheduling`` is AWS's
        ``schedulingConfig`` (``startTime``, ``endTime``, ``endBehavior``,
        ``maintenanceWindows``); ``template`` starts from a job template (its document and
        settings), whose placeholders ``parameters`` fill. Refusals raise
        :class:`~mqstore.errors.JobsError`."""
        request = _args.create_job(
            job_id,
            targets,
            document,
            in_progress_timeout_minutes,
            max_retries,
            description,
            max_per_minute,
            rollout,
            abort,
            retry,
            bool(continuous),
            scheduling,
            template,
            parameters,
        )
        self._native.jobs_operate(request, _AIO)

    def update_job(
        self,
        job_id: str,
        *,
        description: Optional[str] = None,
        in_progress_timeout_minutes: Optional[int] = None,
        max_per_minute: Optional[int] = None,
        rollout: Optional[Mapping[str, Any]] = None,
        abort: Optional[Sequence[Mapping[str, Any]]] = None,
        retry: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> None:
        """Changes a job's description, timeout, rate, abort or retry criteria (as in
        :meth:`create_job`; what is not given stays)."""
        request = _args.operator_call(
            "updateJob",
            job_id=_args.text(job_id, "job_id"),
            **_args.job_settings(
                description, in_progress_timeout_minutes, max_per_minute, rollout, abort, retry
            ),
        )
        self._native.jobs_operate(request, _AIO)

    def cancel_job(
        self,
        job_id: str,
        *,
        force: bool = False,
        reason_code: Optional[str] = None,
        comment: Optional[str] = None,
    ) -> None:
        """Cancels a job: its QUEUED executions (``force``: also those in progress);
        ``reason_code`` (``[A-Z0-9_]+``) and ``comment`` are kept with it."""
        request = _args.operator_call(
            "cancelJob",
            job_id=_args.text(job_id, "job_id"),
            force=bool(force),
            reason_code=_args.optional_text(reason_code, "reason_code"),
            comment=_args.optional_text(comment, "comment"),
        )
        self._native.jobs_operate(request, _AIO)

    def delete_job(self, job_id: str, *, force: bool = False) -> None:
        """Deletes a job and its executions: a completed or canceled one, any with ``force``."""
        request = _args.operator_call(
            "deleteJob", job_id=_args.text(job_id, "job_id"), force=bool(force)
        )
        self._native.jobs_operate(request, _AIO)

    def cancel_job_execution(
        self,
        job_id: str,
        thing: str,
        *,
        force: bool = False,
        expected_version: Optional[int] = None,
        status_details: Optional[Mapping[str, str]] = None,
    ) -> None:
        """Cancels one thing's execution of a job (``force``: one in progress), only if it is
        at ``expected_version`` when given."""
        request = _args.operator_call(
            "cancelJobExecution",
            job_id=_args.text(job_id, "job_id"),
            thing=_args.text(thing, "thing"),
            force=bool(force),
            expected_version=_args.count(expected_version, "expected_version", True),
            status_details=None
            if status_details is None
            else _args.string_map(status_details, "status_details"),
        )
        self._native.jobs_operate(request, _AIO)

    def delete_job_execution(self, job_id: str, thing: str, *, force: bool = False) -> None:
        """Deletes one thing's execution of a job."""
        self._native.delete_job_execution(
            _args.text(job_id, "job_id"), _args.text(thing, "thing"), bool(force), _AIO
        )

    def describe_job(self, job_id: str) -> JobDescription:
        """The job (AWS's ``Job``): its document, status, settings, ``jobProcessDetails``,
        counts per execution status and its rollout's progress."""
        return self._native.describe_job(_args.text(job_id, "job_id"), _AIO)

    def describe_job_execution(self, job_id: str, thing: str) -> JobExecution:
        """One thing's execution of a job."""
        return self._native.describe_job_execution(
            _args.text(job_id, "job_id"), _args.text(thing, "thing"), _AIO
        )

    def list_jobs(self) -> list[JobListing]:
        """Every job, in short."""
        return self._native.list_jobs(_AIO)

    def list_jobs_page(
        self,
        *,
        status: Optional[str] = None,
        max_results: Optional[int] = None,
        next_token: Optional[str] = None,
    ) -> JobsPage:
        """A page of jobs in id order (``{"jobs": [...], "nextToken": ...}``; pass the
        token for the next page), narrowed by job status."""
        request = _args.operator_call(
            "listJobs",
            status=_args.optional_text(status, "status"),
            **_args.page(max_results, next_token),
        )
        page: JobsPage = self._native.jobs_operate(request, _AIO)
        return page

    def list_job_executions_page(
        self,
        *,
        thing: Optional[str] = None,
        job_id: Optional[str] = None,
        status: Optional[str] = None,
        max_results: Optional[int] = None,
        next_token: Optional[str] = None,
    ) -> ExecutionsPage:
        """A page of latest executions (``{"executions": [...], "nextToken": ...}``)."""
        request = _args.operator_call(
            "listJobExecutions",
            thing=_args.optional_text(thing, "thing"),
            job_id=_args.optional_text(job_id, "job_id"),
            status=_args.optional_text(status, "status"),
            **_args.page(max_results, next_token),
        )
        page: ExecutionsPage = self._native.jobs_operate(request, _AIO)
        return page

    def jobs_operate(self, request: Mapping[str, Any]) -> Any:
        """Any operator call as AWS's JSON (``{"op": "updateJob", "jobId": ..., ...}``; see
        docs/protocol/jobs.md): its answer (for describe calls and unpaged lists, the record
        or the list alone)."""
        return self._native.jobs_operate(_args.operator_request(request), _AIO)

    def list_job_executions(
        self,
        *,
        thing: Optional[str] = None,
        job_id: Optional[str] = None,
        status: Optional[str] = None,
    ) -> list[ExecutionListing]:
        """Executions, filtered by thing, job and status (``"QUEUED"``, ``"IN_PROGRESS"``,
        ...)."""
        return self._native.list_job_executions(
            _args.optional_text(thing, "thing"),
            _args.optional_text(job_id, "job_id"),
            _args.optional_text(status, "status"),
            _AIO,
        )

    # --- thing groups and job templates --------------------------------------------------

    def create_thing_group(
        self, name: str, *, description: Optional[str] = None
    ) -> ThingGroupDescription:
        """Makes a static thing group (jobs target it as ``"thinggroup/NAME"``): its
        ``thingGroupName``, ``thingGroupArn`` and ``thingGroupId``."""
        request = _args.operator_call(
            "createThingGroup",
            group=_args.text(name, "name"),
            description=_args.optional_text(description, "description"),
        )
        group: ThingGroupDescription = self._native.jobs_operate(request, _AIO)
        return group

    def delete_thing_group(self, name: str) -> None:
        """Removes a thing group and its membership (jobs keep the things they have)."""
        request = _args.operator_call("deleteThingGroup", group=_args.text(name, "name"))
        self._native.jobs_operate(request, _AIO)

    def describe_thing_group(self, name: str) -> ThingGroupDescription:
        """A thing group: ``thingGroupName``, ``thingGroupArn``, ``thingGroupProperties``,
        ``thingGroupMetadata``."""
        request = _args.operator_call("describeThingGroup", group=_args.text(name, "name"))
        group: ThingGroupDescription = self._native.jobs_operate(request, _AIO)
        return group

    def list_thing_groups(
        self, *, max_results: Optional[int] = None, next_token: Optional[str] = None
    ) -> ThingGroupsPage:
        """A page of thing groups in name order (``{"thingGroups": [...], "nextToken": ...}``)."""
        request = _args.operator_call("listThingGroups", **_args.page(max_results, next_token))
        page: ThingGroupsPage = self._native.jobs_operate(request, _AIO)
        return page

    def add_thing_to_thing_group(self, group: str, thing: str) -> None:
        """Adds ``thing`` to ``group``: continuous jobs on the group reach it (at their rate)."""
        request = _args.operator_call(
            "addThingToThingGroup",
            group=_args.text(group, "group"),
            thing=_args.text(thing, "thing"),
        )
        self._native.jobs_operate(request, _AIO)

    def remove_thing_from_thing_group(self, group: str, thing: str) -> None:
        """Removes ``thing`` from ``group``: its QUEUED executions of continuous jobs on the
        group become REMOVED."""
        request = _args.operator_call(
            "removeThingFromThingGroup",
            group=_args.text(group, "group"),
            thing=_args.text(thing, "thing"),
        )
        self._native.jobs_operate(request, _AIO)

    def list_things_in_thing_group(
        self, group: str, *, max_results: Optional[int] = None, next_token: Optional[str] = None
    ) -> ThingsPage:
        """A page of a group's things in name order (``{"things": [...], "nextToken": ...}``)."""
        request = _args.operator_call(
            "listThingsInThingGroup",
            group=_args.text(group, "group"),
            **_args.page(max_results, next_token),
        )
        page: ThingsPage = self._native.jobs_operate(request, _AIO)
        return page

    def create_job_template(
        self,
        template_id: str,
        document: Mapping[str, Any],
        *,
        description: Optional[str] = None,
        in_progress_timeout_minutes: Optional[int] = None,
        max_per_minute: Optional[int] = None,
        rollout: Optional[Mapping[str, Any]] = None,
        abort: Optional[Sequence[Mapping[str, Any]]] = None,
        retry: Optional[Sequence[Mapping[str, Any]]] = None,
        maintenance_windows: Optional[Sequence[Mapping[str, Any]]] = None,
    ) -> str:
        """Stores a job template (settings as in :meth:`create_job`; ``document`` may hold
        ``${aws:iot:parameter:NAME}`` placeholders that ``create_job(parameters=...)``
        fills). Returns its ARN."""
        request = _args.create_template(
            template_id,
            document,
            description,
            in_progress_timeout_minutes,
            max_per_minute,
            rollout,
            abort,
            retry,
            maintenance_windows,
        )
        answer: JobTemplate = self._native.jobs_operate(request, _AIO)
        return str(answer["jobTemplateArn"])

    def describe_job_template(self, template_id: str) -> JobTemplate:
        """A job template: its document, settings, ``jobTemplateArn`` and ``createdAt``."""
        request = _args.operator_call(
            "describeJobTemplate", job_template_id=_args.text(template_id, "template_id")
        )
        template: JobTemplate = self._native.jobs_operate(request, _AIO)
        return template

    def list_job_templates(
        self, *, max_results: Optional[int] = None, next_token: Optional[str] = None
    ) -> TemplatesPage:
        """A page of job templates in id order (``{"jobTemplates": [...], "nextToken": ...}``)."""
        request = _args.operator_call("listJobTemplates", **_args.page(max_results, next_token))
        page: TemplatesPage = self._native.jobs_operate(request, _AIO)
        return page

    def delete_job_template(self, template_id: str) -> None:
        """Removes a job template (jobs made from it stay)."""
        request = _args.operator_call(
            "deleteJobTemplate", job_template_id=_args.text(template_id, "template_id")
        )
        self._native.jobs_operate(request, _AIO)

    def jobs(self, thing: str) -> Jobs:
        """Acts as ``thing`` on the jobs device API (as a device SDK would): its pending
        list, start-next, updates and notifications."""
        return Jobs(self._native.jobs(_args.text(thing, "thing"), _AIO))

    # --- device shadows ------------------------------------------------------------------

    def shadow(self, thing: str, name: Optional[str] = None) -> Shadow:
        """Uses ``thing``'s device shadow ``name`` (``None``: its classic shadow), as AWS IoT's
        Device Shadow API: get, update and delete, and its deltas and documents as they come.
        Documents are AWS's (:class:`~mqstore.errors.StatusError` with AWS's code when
        refused); needs ``mqstore serve`` (or the mosquitto plugin) with jobs on."""
        thing, name = _args.text(thing, "thing"), _args.optional_text(name, "name")
        return Shadow(self._native.shadow(thing, name, _AIO), thing, name)

    # --- commands to devices (through mqstore serve) -------------------------------------

    def command(
        self,
        topic: str,
        payload: BytesLike = b"",
        *,
        content_type: Optional[str] = None,
        profile: str = "mqtt5",
        timeout: Seconds = 10.0,
        mode: str = "await",
        headers: Optional[Mapping[str, str]] = None,
    ) -> CommandReply:
        """Sends a command to the device listening on ``topic`` and awaits its answer
        (``mode="await"``), the broker's acknowledgement (``"oneway"``) or only its id
        (``"detached"``). A device's error answer raises
        :class:`~mqstore.errors.CommandFailedError` or ``CommandRejectedError``; no answer in
        time, :class:`~mqstore.errors.CommandTimeoutError`. ``profile``: ``"mqtt5"``,
        ``"dji"``, ``"iothub"``, ``"aws"`` (AWS IoT commands devices) or one of the server's;
        a device's progress reports show in :meth:`watch_commands` as records with status
        ``"IN_PROGRESS"``."""
        return self._native.command(
            _args.text(topic, "topic"),
            *_args.command(payload, content_type, profile, timeout, mode, headers),
            _AIO,
        )

    def command_status(self, command_id: str) -> CommandRecord:
        """A command's status record (kept three timeouts after it was sent)."""
        return self._native.command_status(_args.text(command_id, "command_id"), _AIO)

    def start_command(
        self,
        command_id: str,
        target: str,
        *,
        parameters: Optional[Mapping[str, Any]] = None,
        timeout: Seconds = 10.0,
        mode: str = "await",
    ) -> CommandReply:
        """Starts stored command ``command_id`` (see :meth:`define_command`) on ``target`` — a
        thing name, ``"thing/NAME"``, ``"clients/CLIENT_ID"`` or a thing's ARN — as AWS's
        ``StartCommandExecution`` does: ``parameters`` fill its payload template (a string,
        number or boolean, or AWS's typed ``{"S": ...}``, ``{"I": ...}``, ...). Answers and
        errors as :meth:`command`; an unknown command is :class:`~mqstore.errors.StatusError`
        404, a missing or unknown parameter 400."""
        return self._native.start_command(
            *_args.start_command(command_id, target, parameters, timeout, mode), _AIO
        )

    def define_command(self, command: Mapping[str, Any]) -> CommandDefinition:
        """Stores a command (AWS's ``CreateCommand``): ``{"commandId": ..., "payload":
        {"content": ..., "contentType": ...}}`` or ``{"commandId": ..., "payloadTemplate":
        "...${aws:iot:commandexecution::parameter:NAME}...", "mandatoryParameters": [{"name":
        ..., "defaultValue": {"S": ...}}]}``; returns it as stored. A taken id is
        :class:`~mqstore.errors.StatusError` 409, a bad definition 400."""
        arguments = _args.arguments("create", {"command": command})
        answer = self._native.command_definitions("create", arguments, _AIO)
        return answer["command"]

    def command_definition(self, command_id: str) -> CommandDefinition:
        """The stored command ``command_id`` (:class:`~mqstore.errors.StatusError` 404 when
        there is none)."""
        arguments = _args.arguments("get", {"command_id": _args.text(command_id, "command_id")})
        answer = self._native.command_definitions("get", arguments, _AIO)
        return answer["command"]

    def command_definitions(self) -> list[CommandDefinition]:
        """Every stored command, by id."""
        answer = self._native.command_definitions("list", "{}", _AIO)
        return answer["commands"]

    def delete_command_definition(self, command_id: str) -> bool:
        """Deletes stored command ``command_id``: whether there was one."""
        arguments = _args.arguments("delete", {"command_id": _args.text(command_id, "command_id")})
        answer = self._native.command_definitions("delete", arguments, _AIO)
        return answer["deleted"]

    def watch_commands(self) -> CommandWatch:
        """Every command's status changes from now on (any node's, any caller's)."""
        return CommandWatch(self._native.watch_commands(_AIO))

    def watch_keyspace(self) -> KeyspaceWatch:
        """Every key made or deleted from now on, as ``(key, created)`` (the server's keyspace
        events; ``mqstore serve --no-keyspace-events`` turns them off)."""
        return KeyspaceWatch(self._native.watch_keyspace(_AIO))

    def command_many(
        self,
        topics: Sequence[str],
        payload: BytesLike = b"",
        *,
        content_type: Optional[str] = None,
        profile: str = "mqtt5",
        timeout: Seconds = 10.0,
        mode: str = "await",
        headers: Optional[Mapping[str, str]] = None,
    ) -> FanOut:
        """Sends the same command to every device in ``topics`` at once; iterate over the
        result for each device's reply (or error) as it comes."""
        return FanOut(
            self._native.command_many(
                _args.texts(topics, "topics"),
                *_args.command(payload, content_type, profile, timeout, mode, headers),
            )
        )

    # --- end of the calls ---------------------------------------------------------------

    def observe(self, key: BytesLike) -> Observation:
        """Observes ``key``: every change (SET, DEL, VDEL, expiry) from now on, across
        reconnects. Iterate over the result; leaving its ``with`` block stops observing."""
        native = self._native.observe(_args.key(key), False)
        return Observation(self, native)

    def close(self) -> None:
        """Disconnects; calls still in flight fail with
        :class:`~mqstore.errors.ConnectionLostError`."""
        self._native.close(False)

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<mqstore.Client client_id={self.client_id!r}>"


class Observation:
    """The changes of one observed key, in order: an iterator of :class:`Change` that ends
    when the key is unobserved or the client closed."""

    def __init__(self, client: Client, native: _native.Observation) -> None:
        self._client = client
        self._native = native

    @property
    def key(self) -> bytes:
        """The observed key."""
        return self._native.key

    @property
    def ended(self) -> bool:
        """True once the observation was found to have ended (the key was unobserved or the
        client closed, and every change before that was taken)."""
        return self._native.ended

    def next_change(self, timeout: Optional[Seconds] = None) -> Optional[Change]:
        """The next change, waiting at most ``timeout`` seconds (``None``: until one comes).
        ``None`` when the time ran out or the observation ended (see :attr:`ended`)."""
        return self._native.next(_args.optional_millis(timeout, "timeout"), False)

    def __iter__(self) -> Observation:
        return self

    def __next__(self) -> Change:
        change = self._native.next(None, False)
        if change is None:
            raise StopIteration
        return change

    def close(self) -> None:
        """Stops observing the key (see :meth:`Client.unobserve`)."""
        if not self._native.ended:
            self._client.unobserve(self._native.key)

    def __enter__(self) -> Observation:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.close()


class Lease:
    """A held lease. Pass :attr:`fencing_token` with the writes it guards; leaving its ``with``
    block releases it."""

    def __init__(self, native: _native.Lease) -> None:
        self._native = native

    @property
    def key(self) -> bytes:
        """The leased key."""
        return self._native.key

    @property
    def fencing_token(self) -> Hlc:
        """The version of the SET that took the lease."""
        return self._native.fencing_token

    @property
    def held(self) -> bool:
        """False once released, or once a renewal found someone else holding the key."""
        return self._native.held

    def release(self) -> bool:
        """Releases the lease; true when it was still held (false when released already)."""
        return self._native.release(False)

    def __enter__(self) -> Lease:
        return self

    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        traceback: Optional[TracebackType],
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        return (
            f"<mqstore.Lease key={self.key!r} fencing_token={self.fencing_token} held={self.held}>"
        )
