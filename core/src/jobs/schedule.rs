//! `schedulingConfig`: a job's start and end times and its maintenance windows, with the
//! UTC calendar and AWS's cron expressions they are written in (no I/O, no clock: every
//! function takes the time it is asked about).

use super::Jobs;
use super::groups::tables;
use super::model::Stored;
use super::model::{Job, JobsError};
use super::store::JobsStore;
use super::wire::{EndBehavior, JobStatus, MaintenanceWindow, SchedulingConfig};
use crate::envelope::Publish;

const MINUTE_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;
/// How far ahead a cron is searched for its next start: a cron that does not fire within
/// this is refused as one that never fires.
const SEARCH_DAYS: u64 = 5 * 366;

/// Days since 1970-01-01 of a civil date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let yoe = year - era * 400;
    let mp = (i64::from(month) + 9) % 12;
    let doy = (153 * mp + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day since 1970-01-01: (year, month 1-12, day 1-31).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(month <= 2), month, day)
}

/// `YYYY-MM-DDTHH:MM` (with `:SS` and a trailing `Z` allowed), UTC, as epoch ms.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let error = || format!("{text:?} is no time of the form YYYY-MM-DDTHH:MM (UTC)");
    let trimmed = text.strip_suffix('Z').unwrap_or(text);
    let (date, time) = trimmed.split_once('T').ok_or_else(error)?;
    let numbers = |part: &str, sep: char| -> Result<Vec<u32>, String> {
        part.split(sep)
            .map(|n| match n.len() {
                2 | 4 if n.bytes().all(|b| b.is_ascii_digit()) => n.parse().map_err(|_| error()),
                _ => Err(error()),
            })
            .collect()
    };
    let (date, time) = (numbers(date, '-')?, numbers(time, ':')?);
    let [year, month, day] = date[..] else {
        return Err(error());
    };
    let (hour, minute, second) = match time[..] {
        [h, m] => (h, m, 0),
        [h, m, s] => (h, m, s),
        _ => return Err(error()),
    };
    let days_in_month = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        _ => return Err(error()),
    };
    if !(1970..=9999).contains(&year)
        || !(1..=days_in_month).contains(&day)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(error());
    }
    let days = days_from_civil(i64::from(year), month, day) as u64;
    Ok(days * DAY_MS + u64::from(hour * 3600 + minute * 60 + second) * 1000)
}

/// An AWS cron expression, `cron(minutes hours day-of-month month day-of-week year)`:
/// each field `*`, a value, a range `a-b`, a step `a/n` or `a-b/n` or `*/n`, or a list of
/// those; months also JAN-DEC, days of the week 1-7 or SUN-SAT; `?` in one of the two day
/// fields (AWS asks for it in exactly one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    /// Years from 1970 on, one bit each (until 2199, AWS's last).
    years: [u64; 4],
    /// `?` in the day-of-month field (the day of the week decides), else in the other.
    by_weekday: bool,
}

const MONTHS: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const WEEKDAYS: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];

/// The values of one cron field, between `low` and `high`, as bits from `low`.
fn field(text: &str, what: &str, low: u32, high: u32, names: &[&str]) -> Result<Vec<u32>, String> {
    let value = |v: &str| -> Result<u32, String> {
        if let Some(at) = names.iter().position(|n| n.eq_ignore_ascii_case(v)) {
            return Ok(low + at as u32);
        }
        match v.parse::<u32>() {
            Ok(n) if (low..=high).contains(&n) => Ok(n),
            _ => Err(format!("{what}: {v:?} is not in {low}-{high}")),
        }
    };
    let mut values = Vec::new();
    for part in text.split(',') {
        if part.contains(['L', 'W', '#']) && !names.iter().any(|n| part.contains(n)) {
            return Err(format!(
                "{what}: {part:?} (L, W and # are not supported by mqstore)"
            ));
        }
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => match step.parse::<u32>() {
                Ok(step) if step >= 1 => (range, step),
                _ => return Err(format!("{what}: the step of {part:?} is not a number ≥ 1")),
            },
            None => (part, 1),
        };
        let (from, to) = match range {
            "*" => (low, high),
            _ => match range.split_once('-') {
                Some((a, b)) => (value(a)?, value(b)?),
                None if step > 1 => (value(range)?, high),
                None => {
                    let v = value(range)?;
                    (v, v)
                }
            },
        };
        if from > to {
            return Err(format!("{what}: the range {range:?} is backwards"));
        }
        values.extend((from..=to).step_by(step as usize));
    }
    Ok(values)
}

fn bits(values: &[u32], low: u32) -> u64 {
    values.iter().fold(0, |bits, v| bits | 1 << (v - low))
}

impl Cron {
    /// Reads `cron(…)` (the wrapper may be left out).
    pub fn parse(text: &str) -> Result<Self, String> {
        let inner = text
            .trim()
            .strip_prefix("cron(")
            .and_then(|t| t.strip_suffix(')'))
            .unwrap_or(text.trim());
        let fields: Vec<&str> = inner.split_whitespace().collect();
        let [minutes, hours, dom, month, dow, year] = fields[..] else {
            return Err(format!(
                "{text:?}: a cron is cron(minutes hours day-of-month month day-of-week year)"
            ));
        };
        if (dom == "?") == (dow == "?") {
            return Err(format!(
                "{text:?}: one of day-of-month and day-of-week is '?' (as AWS asks)"
            ));
        }
        let by_weekday = dom == "?";
        let mut years = [0u64; 4];
        for y in field(year, "year", 1970, 2199, &[])? {
            let at = (y - 1970) as usize;
            years[at / 64] |= 1 << (at % 64);
        }
        let days = match by_weekday {
            true => u32::MAX,
            false => bits(&field(dom, "day-of-month", 1, 31, &[])?, 1) as u32,
        };
        let weekdays = match by_weekday {
            true => bits(&field(dow, "day-of-week", 1, 7, &WEEKDAYS)?, 1) as u8,
            false => u8::MAX,
        };
        Ok(Self {
            minutes: bits(&field(minutes, "minutes", 0, 59, &[])?, 0),
            hours: bits(&field(hours, "hours", 0, 23, &[])?, 0) as u32,
            days,
            months: bits(&field(month, "month", 1, 12, &MONTHS)?, 1) as u16,
            weekdays,
            years,
            by_weekday,
        })
    }

    fn on_day(&self, days: i64) -> bool {
        let (year, month, day) = civil_from_days(days);
        let at = (year - 1970) as usize;
        let weekday = (days + 4).rem_euclid(7) as u32; // 1970-01-01 was a Thursday; SUN = 0
        (0..230).contains(&at)
            && self.years[at / 64] & 1 << (at % 64) != 0
            && self.months & 1 << (month - 1) != 0
            && match self.by_weekday {
                true => self.weekdays & 1 << weekday != 0,
                false => self.days & 1 << (day - 1) != 0,
            }
    }

    /// The first time at or after `from_ms` that it fires (whole minutes), within five
    /// years.
    pub fn next(&self, from_ms: u64) -> Option<u64> {
        let from = from_ms.div_ceil(MINUTE_MS) * MINUTE_MS;
        let first_day = (from / DAY_MS) as i64;
        for days in first_day..first_day + SEARCH_DAYS as i64 {
            if !self.on_day(days) {
                continue;
            }
            let start = days as u64 * DAY_MS;
            for hour in (0..24).filter(|h| self.hours & 1 << h != 0) {
                for minute in (0..60).filter(|m| self.minutes & 1 << m != 0) {
                    let at = start + (hour * 60 + minute) * MINUTE_MS;
                    if at >= from {
                        return Some(at);
                    }
                }
            }
        }
        None
    }
}

impl MaintenanceWindow {
    /// The window open at `now_ms` (when it ends), or `None`.
    pub fn open_until(&self, now_ms: u64) -> Option<u64> {
        let cron = Cron::parse(&self.start_time).ok()?;
        let length = u64::from(self.duration_in_minutes) * MINUTE_MS;
        let start = cron.next((now_ms + 1).saturating_sub(length))?;
        (start <= now_ms).then_some(start + length)
    }

    /// When it next opens, after `now_ms`.
    pub fn next_start(&self, now_ms: u64) -> Option<u64> {
        Cron::parse(&self.start_time).ok()?.next(now_ms + 1)
    }

    /// AWS's ranges, and a cron that fires.
    pub(crate) fn validate(&self, now_ms: u64) -> Result<(), String> {
        if !(1..=1430).contains(&self.duration_in_minutes) {
            return Err("maintenanceWindows: durationInMinutes is 1-1430".into());
        }
        let cron = Cron::parse(&self.start_time).map_err(|e| format!("maintenanceWindows: {e}"))?;
        if cron.next(now_ms).is_none() {
            return Err(format!(
                "maintenanceWindows: {:?} never fires (within five years)",
                self.start_time
            ));
        }
        Ok(())
    }
}

/// The windows a rollout waits for: whether one is open at `now_ms`, else when the next
/// opens (`None`: never again).
pub(crate) fn window(windows: &[MaintenanceWindow], now_ms: u64) -> Result<(), Option<u64>> {
    if windows.is_empty() || windows.iter().any(|w| w.open_until(now_ms).is_some()) {
        return Ok(());
    }
    Err(windows.iter().filter_map(|w| w.next_start(now_ms)).min())
}

impl SchedulingConfig {
    /// `startTime` in epoch ms.
    pub fn start_ms(&self) -> Option<u64> {
        parse_time(self.start_time.as_deref()?).ok()
    }

    /// `endTime` in epoch ms.
    pub fn end_ms(&self) -> Option<u64> {
        parse_time(self.end_time.as_deref()?).ok()
    }

    /// Valid times (a start in the future, as AWS asks; an end after the start and after
    /// now), windows that fire.
    pub(crate) fn validate(&self, now_ms: u64) -> Result<(), String> {
        let time = |text: &Option<String>, name: &str| -> Result<Option<u64>, String> {
            text.as_deref()
                .map(parse_time)
                .transpose()
                .map_err(|e| format!("schedulingConfig.{name}: {e}"))
        };
        let start = time(&self.start_time, "startTime")?;
        let end = time(&self.end_time, "endTime")?;
        if start.is_some_and(|start| start <= now_ms) {
            return Err(format!(
                "schedulingConfig.startTime: {} is not in the future (a job starts now without one)",
                self.start_time.as_deref().unwrap_or_default()
            ));
        }
        if let Some(end) = end {
            if end <= start.unwrap_or(now_ms).max(now_ms) {
                return Err("schedulingConfig.endTime: after the start time and after now".into());
            }
        } else if self.end_behavior.is_some() {
            return Err("schedulingConfig.endBehavior needs an endTime".into());
        }
        for window in &self.maintenance_windows {
            window.validate(now_ms)?;
        }
        Ok(())
    }
}

impl<S: JobsStore> Jobs<S> {
    /// Starts the scheduled jobs whose start time came and ends those whose end time came
    /// (by their `endBehavior`); once per job, whichever node gets there first.
    pub(crate) fn schedule(&mut self, now_ms: u64, out: &mut Vec<Publish>) -> Stored<()> {
        for (job_id, _) in self.store.entries(tables::SCHEDULES, None, u64::MAX)? {
            let Some(job) = self.store.job(&job_id)? else {
                self.store
                    .put_entry(tables::SCHEDULES, &job_id, None, false)?;
                continue;
            };
            let Some(scheduling) = job.scheduling_config.clone() else {
                self.store
                    .put_entry(tables::SCHEDULES, &job_id, None, false)?;
                continue;
            };
            if job.status == JobStatus::Scheduled
                && scheduling.start_ms().is_none_or(|start| start <= now_ms)
            {
                let mut started = (*job).clone();
                started.status = JobStatus::InProgress;
                started.last_updated_at = now_ms;
                started.pace.at_ms = now_ms;
                // Another node may have started it: read again next time.
                self.store.put_job(started)?;
                continue;
            }
            let ended = scheduling.end_ms().is_none_or(|end| end <= now_ms);
            let open = matches!(job.status, JobStatus::Scheduled | JobStatus::InProgress);
            if !open || !ended {
                continue;
            }
            if scheduling.end_ms().is_some() {
                self.end(
                    &job,
                    scheduling.end_behavior.unwrap_or_default(),
                    now_ms,
                    out,
                )?;
            }
            self.store
                .put_entry(tables::SCHEDULES, &job_id, None, false)?;
        }
        Ok(())
    }

    /// A job's `endTime` came: its `endBehavior`.
    fn end(
        &mut self,
        job: &Job,
        behavior: EndBehavior,
        now_ms: u64,
        out: &mut Vec<Publish>,
    ) -> Stored<()> {
        let force = match behavior {
            EndBehavior::StopRollout => return self.store.stop_rollout(&job.id).map(drop),
            EndBehavior::Cancel => false,
            EndBehavior::ForceCancel => true,
        };
        let comment = Some("the job's schedulingConfig.endTime came".to_owned());
        match self.cancel_job(&job.id, force, None, comment, now_ms, out) {
            Ok(()) | Err(JobsError::InvalidState(_) | JobsError::NotFound(_)) => Ok(()),
            Err(JobsError::Store(e)) => Err(e),
            Err(other) => Err(super::StoreError(other.to_string())),
        }
    }

    /// When the scheduler next has something to do: the earliest start or end to come.
    pub(crate) fn next_schedule(&self) -> Stored<Option<u64>> {
        let mut next: Option<u64> = None;
        for (job_id, _) in self.store.entries(tables::SCHEDULES, None, u64::MAX)? {
            let Some(job) = self.store.job(&job_id)? else {
                continue;
            };
            let Some(scheduling) = &job.scheduling_config else {
                continue;
            };
            let at = match job.status {
                JobStatus::Scheduled => scheduling.start_ms(),
                _ => scheduling.end_ms(),
            };
            if let Some(at) = at {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_as_utc() {
        assert_eq!(parse_time("1970-01-01T00:00").unwrap(), 0);
        assert_eq!(parse_time("1970-01-02T00:01").unwrap(), DAY_MS + MINUTE_MS);
        assert_eq!(
            parse_time("2026-11-26T15:30:05Z").unwrap(),
            1_795_707_005_000
        );
        assert_eq!(parse_time("2024-02-29T00:00").unwrap(), 1_709_164_800_000);
        for bad in ["2025-02-29T00:00", "2026-11-26", "2026-11-26T24:00", "soon"] {
            assert!(parse_time(bad).is_err(), "{bad}");
        }
        for days in [-1000, 0, 59, 365 * 56 + 14] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
    }

    #[test]
    fn a_cron_fires_at_its_next_matching_minute() {
        let t = |text| parse_time(text).unwrap();
        // 02:30 every Saturday; 2026-11-26 is a Thursday.
        let cron = Cron::parse("cron(30 2 ? * SAT *)").unwrap();
        assert_eq!(
            cron.next(t("2026-11-26T15:00")),
            Some(t("2026-11-28T02:30"))
        );
        assert_eq!(
            cron.next(t("2026-11-28T02:30")),
            Some(t("2026-11-28T02:30"))
        );
        assert_eq!(
            cron.next(t("2026-11-28T02:31")),
            Some(t("2026-12-05T02:30"))
        );
        // Every 15 minutes from 9 to 17 on the 1st and 15th of each month.
        let cron = Cron::parse("0/15 9-17 1,15 * ? *").unwrap();
        assert_eq!(
            cron.next(t("2026-11-26T15:00")),
            Some(t("2026-12-01T09:00"))
        );
        assert_eq!(
            cron.next(t("2026-12-01T09:01")),
            Some(t("2026-12-01T09:15"))
        );
        // Months by name, a year.
        let cron = Cron::parse("cron(0 0 1 JAN ? 2027)").unwrap();
        assert_eq!(
            cron.next(t("2026-11-26T15:00")),
            Some(t("2027-01-01T00:00"))
        );
        assert_eq!(cron.next(t("2027-01-01T00:01")), None);
        // Never: February 30th.
        assert_eq!(Cron::parse("0 0 30 2 ? *").unwrap().next(0), None);
        for bad in [
            "cron(0 0 * * * *)",
            "cron(0 0 ? * ? *)",
            "cron(61 0 ? * MON *)",
            "cron(0 0 L * ? *)",
            "cron(0 0 ? * MON)",
            "cron(0 5-2 ? * MON *)",
        ] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_window_is_open_from_its_start_for_its_duration() {
        let t = |text| parse_time(text).unwrap();
        let window = MaintenanceWindow {
            start_time: "cron(0 22 ? * * *)".into(),
            duration_in_minutes: 120,
        };
        assert_eq!(window.open_until(t("2026-11-26T21:59")), None);
        assert_eq!(
            window.open_until(t("2026-11-26T22:00")),
            Some(t("2026-11-27T00:00"))
        );
        assert_eq!(
            window.open_until(t("2026-11-26T23:59")),
            Some(t("2026-11-27T00:00"))
        );
        assert_eq!(window.open_until(t("2026-11-27T00:00")), None);
        assert_eq!(
            window.next_start(t("2026-11-27T00:00")),
            Some(t("2026-11-27T22:00"))
        );
        let windows = [window];
        assert_eq!(
            self::window(&windows, t("2026-11-27T10:00")),
            Err(Some(t("2026-11-27T22:00")))
        );
        assert_eq!(self::window(&windows, t("2026-11-27T22:10")), Ok(()));
        let never = MaintenanceWindow {
            start_time: "cron(0 0 30 2 ? *)".into(),
            duration_in_minutes: 30,
        };
        let error = never.validate(0).unwrap_err();
        assert!(error.contains("never fires"), "{error}");
    }
}
