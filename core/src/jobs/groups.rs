//! Thing groups and job templates (AWS's `CreateThingGroup` and friends, `CreateJobTemplate`
//! and friends), and how a job's targets become its things: groups expanded when the job is
//! created, and for a CONTINUOUS job also as their membership changes.
//!
//! They live in the store's tables ([`JobsStore::entry`]): [`tables::GROUPS`] (a group's
//! record), `members/{group}` (its things), `continuous/{group}` (the continuous jobs that
//! target it) and [`tables::TEMPLATES`].

use serde_json::Value;

use super::model::Stored;
use super::model::{Job, JobsError, Target, check_document, resource, valid_job_id};
use super::store::JobsStore;
use super::wire::{
    GroupListing, JobTemplate, Membership, PageRequest, TargetSelection, TemplateListing,
    ThingGroupDescription, ThingGroupMetadata, ThingGroupProperties,
};
use super::wire::{Status, valid_thing_name};
use super::{JobSpec, Jobs, StoreError, THING_NAME_RULE, queue};
use crate::envelope::Publish;

/// The names of the tables the operator API keeps in the store.
pub mod tables {
    /// Thing groups: name → [`super::GroupRecord`] as JSON.
    pub const GROUPS: &str = "groups";
    /// Job templates: id → [`super::JobTemplate`] as JSON.
    pub const TEMPLATES: &str = "templates";
    /// Jobs with a start or end time still to come: id → nothing.
    pub const SCHEDULES: &str = "schedules";

    /// A group's things: thing → nothing.
    pub fn members(group: &str) -> String {
        format!("members/{group}")
    }

    /// The continuous jobs that target a group: job id → nothing.
    pub fn continuous(group: &str) -> String {
        format!("continuous/{group}")
    }
}

/// Entries read at a time when a table is gone through (a group's members for `createJob`).
/// Large: on Redis each page is a round trip, and a replay ([`super::Replay`]) answers
/// every page read so far again at each step (a million members are 62 pages).
const PAGE: u64 = 16_384;

/// The ARN mqstore gives its resources (AWS's form, with a region and account of its own).
pub fn arn(kind: &str, name: &str) -> String {
    format!("arn:aws:iot:mqstore:000000000000:{kind}/{name}")
}

/// A group as its table keeps it.
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupRecord {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    /// What the group is for.
    pub description: Option<String>,
    /// Epoch ms.
    pub created_at: u64,
}

fn json<T: serde::Serialize>(value: &T) -> Vec<u8> {
    // Our own types: they always serialize.
    serde_json::to_vec(value).unwrap_or_default()
}

fn decode<T: serde::de::DeserializeOwned>(what: &str, bytes: &[u8]) -> Stored<T> {
    serde_json::from_slice(bytes).map_err(|e| StoreError(format!("a malformed {what}: {e}")))
}

fn group_name(name: &str) -> Result<&str, JobsError> {
    match valid_thing_name(name) {
        true => Ok(name),
        false => Err(JobsError::Invalid(format!(
            "thing group name {name:?}: {THING_NAME_RULE}"
        ))),
    }
}

/// A name, or the name in an ARN of `kind`, from whichever of the two fields is given.
fn named(name: &Option<String>, arn: &Option<String>, kind: &str) -> Result<String, JobsError> {
    let field = match kind {
        "thing" => "thingName or thingArn",
        _ => "thingGroupName or thingGroupArn",
    };
    let name = match (name, arn) {
        (Some(name), None) => name.as_str(),
        (None, Some(arn)) => resource(arn, kind)
            .ok_or_else(|| JobsError::Invalid(format!("{arn:?} is no {kind} ARN")))?,
        _ => return Err(JobsError::Invalid(format!("give one of {field}"))),
    };
    match valid_thing_name(name) {
        true => Ok(name.to_owned()),
        false => Err(JobsError::Invalid(format!(
            "{kind} name {name:?}: {THING_NAME_RULE}"
        ))),
    }
}

/// One page of a table: its entries' names after `token`, and the next token.
type Page = (Vec<String>, Option<String>);

impl<S: JobsStore> Jobs<S> {
    /// Makes a static thing group.
    pub fn create_group(
        &mut self,
        name: &str,
        properties: Option<ThingGroupProperties>,
        now_ms: u64,
    ) -> Result<ThingGroupDescription, JobsError> {
        let name = group_name(name)?;
        let description = properties.and_then(|p| p.thing_group_description);
        if description
            .as_ref()
            .is_some_and(|d| d.chars().count() > 2028)
        {
            return Err(JobsError::Invalid(
                "thingGroupDescription: at most 2028 characters".into(),
            ));
        }
        let record = GroupRecord {
            description,
            created_at: now_ms,
        };
        if !self
            .store
            .put_entry(tables::GROUPS, name, Some(&json(&record)), true)?
        {
            return Err(JobsError::Exists(format!("thing group {name}")));
        }
        Ok(describe_group(name, record))
    }

    /// A group's record.
    pub fn group(&self, name: &str) -> Result<ThingGroupDescription, JobsError> {
        let name = group_name(name)?;
        let record = self
            .store
            .entry(tables::GROUPS, name)?
            .ok_or_else(|| JobsError::NotFound(format!("thing group {name}")))?;
        Ok(describe_group(name, decode("thing group", &record)?))
    }

    /// Removes a group and its membership. Jobs that targeted it keep the things they have.
    pub fn delete_group(&mut self, name: &str) -> Result<(), JobsError> {
        let name = group_name(name)?;
        if !self.store.put_entry(tables::GROUPS, name, None, false)? {
            return Err(JobsError::NotFound(format!("thing group {name}")));
        }
        self.store.drop_table(&tables::members(name))?;
        self.store.drop_table(&tables::continuous(name))?;
        Ok(())
    }

    /// A page of groups, in name order.
    pub fn list_groups(
        &self,
        page: &PageRequest,
        limit: usize,
    ) -> Stored<(Vec<GroupListing>, Option<String>)> {
        let (names, token) = self.page(tables::GROUPS, page, limit)?;
        let groups = names
            .into_iter()
            .map(|name| GroupListing {
                group_arn: arn("thinggroup", &name),
                group_name: name,
            })
            .collect();
        Ok((groups, token))
    }

    /// A page of a group's things, in name order.
    pub fn group_things(
        &self,
        name: &str,
        page: &PageRequest,
        limit: usize,
    ) -> Result<Page, JobsError> {
        self.group(name)?;
        Ok(self.page(&tables::members(name), page, limit)?)
    }

    /// Up to `limit` names of a table after the page's token.
    fn page(&self, table: &str, page: &PageRequest, limit: usize) -> Stored<Page> {
        let count = (limit as u64).saturating_add(1);
        let entries = self
            .store
            .entries(table, page.next_token.as_deref(), count)?;
        let mut names: Vec<String> = entries.into_iter().map(|(name, _)| name).collect();
        let token = match names.len() > limit {
            true => {
                names.truncate(limit);
                names.last().cloned()
            }
            false => None,
        };
        Ok((names, token))
    }

    /// Adds a thing to a group; each continuous job on the group gets it (at its rate).
    pub fn add_to_group(
        &mut self,
        membership: &Membership,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        let (group, thing) = self.membership(membership)?;
        // Member first, then the jobs: a continuous job created meanwhile registers itself
        // before it reads the members, so one of the two sees the thing (or both: a thing
        // listed twice gets one execution).
        self.store
            .put_entry(&tables::members(&group), &thing, Some(b""), false)?;
        let jobs = self.continuous_jobs(&group)?;
        for job in &jobs {
            self.store
                .add_job_things(&job.id, std::slice::from_ref(&thing))?;
        }
        if !jobs.is_empty() {
            self.roll_out(now_ms, out)?;
        }
        Ok(())
    }

    /// Removes a thing from a group: for each continuous job on the group (unless the job
    /// reaches the thing another way) its QUEUED execution becomes REMOVED, and a rollout
    /// that had not reached it yet passes it by.
    pub fn remove_from_group(
        &mut self,
        membership: &Membership,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Result<(), JobsError> {
        let (group, thing) = self.membership(membership)?;
        if !self
            .store
            .put_entry(&tables::members(&group), &thing, None, false)?
        {
            return Err(JobsError::NotFound(format!(
                "thing {thing} in thing group {group}"
            )));
        }
        for job in self.continuous_jobs(&group)? {
            if self.targets_thing(&job, &thing)? {
                continue;
            }
            self.change(&thing, now_ms, out, |record| {
                match record.latest(&job.id).map(|e| e.status) {
                    Some(Status::Queued) => {
                        if let Some(execution) = record.latest_mut(&job.id) {
                            execution.end(Status::Removed, now_ms);
                        }
                    }
                    // Not reached yet: a REMOVED execution that the rollout passes by.
                    None => {
                        queue(record, &job, &thing, 1, now_ms);
                        if let Some(execution) = record.latest_mut(&job.id) {
                            execution.end(Status::Removed, now_ms);
                        }
                    }
                    _ => {}
                }
                Ok::<_, StoreError>(())
            })?;
        }
        Ok(())
    }

    /// The group (which exists) and the thing a membership call names.
    fn membership(&self, membership: &Membership) -> Result<(String, String), JobsError> {
        let group = named(
            &membership.thing_group_name,
            &membership.thing_group_arn,
            "thinggroup",
        )?;
        let thing = named(&membership.thing_name, &membership.thing_arn, "thing")?;
        self.group(&group)?;
        Ok((group, thing))
    }

    /// Every name in a table, read a page at a time.
    fn names(&self, table: &str) -> Stored<Vec<String>> {
        let mut names = Vec::new();
        loop {
            let entries = self
                .store
                .entries(table, names.last().map(String::as_str), PAGE)?;
            let full = entries.len() as u64 == PAGE;
            names.extend(entries.into_iter().map(|(name, _)| name));
            if !full {
                return Ok(names);
            }
        }
    }

    /// Whether `job` targets `thing` by name or through one of its groups.
    pub(crate) fn targets_thing(&self, job: &Job, thing: &str) -> Stored<bool> {
        for target in &job.targets {
            match Target::parse(target) {
                Ok(Target::Thing(name)) if name == thing => return Ok(true),
                Ok(Target::Group(group))
                    if self.store.entry(&tables::members(&group), thing)?.is_some() =>
                {
                    return Ok(true);
                }
                _ => {}
            }
        }
        Ok(false)
    }

    /// The continuous jobs on `group` that still take things.
    fn continuous_jobs(&self, group: &str) -> Stored<Vec<std::sync::Arc<Job>>> {
        let group_target = Target::Group(group.to_owned());
        let mut jobs = Vec::new();
        for job_id in self.names(&tables::continuous(group))? {
            let Some(job) = self.store.job(&job_id)? else {
                continue;
            };
            if job.target_selection == TargetSelection::Continuous
                && matches!(
                    job.status,
                    super::JobStatus::InProgress | super::JobStatus::Scheduled
                )
                && job
                    .targets
                    .iter()
                    .any(|t| Target::parse(t).as_ref() == Ok(&group_target))
            {
                jobs.push(job);
            }
        }
        Ok(jobs)
    }

    /// The things a new job runs on, in order: its things, then its groups' members. A
    /// continuous job is registered on its groups first (see [`Jobs::add_to_group`]).
    pub(crate) fn job_things_of(&mut self, spec: &JobSpec) -> Result<Vec<String>, JobsError> {
        let continuous = spec.target_selection == Some(TargetSelection::Continuous);
        let mut things = Vec::new();
        for target in &spec.targets {
            match Target::parse(target).map_err(JobsError::Invalid)? {
                Target::Thing(thing) => things.push(thing),
                Target::Group(group) => {
                    self.group(&group)?;
                    if continuous {
                        self.store.put_entry(
                            &tables::continuous(&group),
                            &spec.job_id,
                            Some(b""),
                            false,
                        )?;
                    }
                    things.extend(self.names(&tables::members(&group))?);
                }
            }
        }
        Ok(things)
    }

    // ---- templates ----

    /// Stores a job template.
    pub fn create_template(
        &mut self,
        mut template: JobTemplate,
        now_ms: u64,
    ) -> Result<(String, String), JobsError> {
        let id = template.job_template_id.clone();
        if !valid_job_id(&id) {
            return Err(JobsError::Invalid(format!(
                "jobTemplateId {id:?}: 1-64 characters of a-z, A-Z, 0-9, '_' and '-'"
            )));
        }
        check_document(&template.document)?;
        template.config.validate().map_err(JobsError::Invalid)?;
        for window in &template.maintenance_windows {
            window.validate(now_ms).map_err(JobsError::Invalid)?;
        }
        template.job_template_arn = None;
        template.created_at = Some(now_ms / 1000);
        if !self
            .store
            .put_entry(tables::TEMPLATES, &id, Some(&json(&template)), true)?
        {
            return Err(JobsError::Exists(format!("job template {id}")));
        }
        Ok((arn("jobtemplate", &id), id))
    }

    /// A template, by id, `jobtemplate/ID` or ARN.
    pub fn template(&self, id: &str) -> Result<JobTemplate, JobsError> {
        let id = resource(id, "jobtemplate").unwrap_or(id);
        let bytes = self
            .store
            .entry(tables::TEMPLATES, id)?
            .ok_or_else(|| JobsError::NotFound(format!("job template {id}")))?;
        let mut template: JobTemplate = decode("job template", &bytes)?;
        template.job_template_arn = Some(arn("jobtemplate", id));
        Ok(template)
    }

    /// Removes a template (jobs made from it stay as they are).
    pub fn delete_template(&mut self, id: &str) -> Result<(), JobsError> {
        match self.store.put_entry(tables::TEMPLATES, id, None, false)? {
            true => Ok(()),
            false => Err(JobsError::NotFound(format!("job template {id}"))),
        }
    }

    /// A page of templates, in id order.
    pub fn list_templates(
        &self,
        page: &PageRequest,
        limit: usize,
    ) -> Result<(Vec<TemplateListing>, Option<String>), JobsError> {
        let (ids, token) = self.page(tables::TEMPLATES, page, limit)?;
        let mut templates = Vec::with_capacity(ids.len());
        for id in ids {
            let template = self.template(&id)?;
            templates.push(TemplateListing {
                job_template_arn: arn("jobtemplate", &id),
                job_template_id: id,
                description: template.config.description,
                created_at: template.created_at.unwrap_or_default(),
            });
        }
        Ok((templates, token))
    }

    /// A `createJob` request completed from its template (what the request leaves out comes
    /// from the template) and with its document's parameters filled in.
    pub(crate) fn apply_template(&self, spec: &mut JobSpec) -> Result<(), JobsError> {
        if let Some(arn) = &spec.job_template_arn {
            let template = self.template(arn)?;
            if !spec.document.is_null() {
                return Err(JobsError::Invalid(
                    "give a document or jobTemplateArn, not both".into(),
                ));
            }
            spec.document = template.document;
            let (config, from) = (&mut spec.config, template.config);
            config.description = config.description.take().or(from.description);
            config.timeout_config = config.timeout_config.take().or(from.timeout_config);
            config.job_executions_retry_config = config
                .job_executions_retry_config
                .take()
                .or(from.job_executions_retry_config);
            config.job_executions_rollout_config = config
                .job_executions_rollout_config
                .take()
                .or(from.job_executions_rollout_config);
            config.abort_config = config.abort_config.take().or(from.abort_config);
            if !template.maintenance_windows.is_empty() {
                let scheduling = spec.scheduling_config.get_or_insert_default();
                if scheduling.maintenance_windows.is_empty() {
                    scheduling.maintenance_windows = template.maintenance_windows;
                }
            }
        }
        if spec.job_template_arn.is_none() && !spec.document_parameters.is_empty() {
            return Err(JobsError::Invalid(
                "documentParameters fill a template's document: give jobTemplateArn too".into(),
            ));
        }
        if spec.job_template_arn.is_some() {
            for name in spec.document_parameters.keys() {
                if name.is_empty()
                    || name.len() > 128
                    || !name
                        .bytes()
                        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
                {
                    return Err(JobsError::Invalid(format!(
                        "documentParameters: the name {name:?} is 1-128 characters of \
                         a-z, A-Z, 0-9, '_' and '-'"
                    )));
                }
            }
            fill(&mut spec.document, &spec.document_parameters)?;
        }
        Ok(())
    }
}

fn describe_group(name: &str, record: GroupRecord) -> ThingGroupDescription {
    ThingGroupDescription {
        thing_group_name: name.to_owned(),
        thing_group_id: name.to_owned(),
        thing_group_arn: arn("thinggroup", name),
        thing_group_properties: ThingGroupProperties {
            thing_group_description: record.description,
        },
        thing_group_metadata: ThingGroupMetadata {
            creation_date: record.created_at / 1000,
        },
    }
}

const PLACEHOLDER: &str = "${aws:iot:parameter:";

/// Replaces every `${aws:iot:parameter:NAME}` in the document's strings with the parameter's
/// value; a placeholder without a value is an error.
fn fill(
    document: &mut Value,
    parameters: &std::collections::BTreeMap<String, String>,
) -> Result<(), JobsError> {
    match document {
        Value::String(text) if text.contains(PLACEHOLDER) => {
            let mut filled = String::with_capacity(text.len());
            let mut rest = text.as_str();
            while let Some(at) = rest.find(PLACEHOLDER) {
                filled.push_str(&rest[..at]);
                let after = &rest[at + PLACEHOLDER.len()..];
                let end = after.find('}').ok_or_else(|| {
                    JobsError::Invalid(format!("the document has an unclosed {PLACEHOLDER}…"))
                })?;
                let name = &after[..end];
                let value = parameters.get(name).ok_or_else(|| {
                    JobsError::Invalid(format!(
                        "documentParameters has no value for {name:?} \
                         (the document's {PLACEHOLDER}{name}}})"
                    ))
                })?;
                filled.push_str(value);
                rest = &after[end + 1..];
            }
            filled.push_str(rest);
            *text = filled;
        }
        Value::Array(items) => items.iter_mut().try_for_each(|v| fill(v, parameters))?,
        Value::Object(fields) => fields.values_mut().try_for_each(|v| fill(v, parameters))?,
        _ => {}
    }
    Ok(())
}
