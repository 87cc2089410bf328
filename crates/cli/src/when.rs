//! WHEN of `zftl revert --to` and `zftl view --at`, and the durations of
//! `zftl serve --protect`: which snapshot or protection-window point a
//! name, a time, a time ago or a sequence number stands for.
//!
//! The resolution runs on the client's side, on the `snapshots` list (the
//! control requests take names only), so a revert and a view of the same
//! WHEN against the same list name the same snapshot.

use serde::Serialize;
use serde_json::Value;
use zftl_core::history::{parse_rfc3339_utc, rfc3339_utc, POINT_PREFIX};

use crate::error::CliError;

const NS_PER_SEC: u64 = 1_000_000_000;

/// What WHEN says, before it meets a list of snapshots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum When {
    /// A wall time, in seconds since the Unix epoch.
    Time(u64),
    /// This many seconds before now.
    Ago(u64),
    /// A sequence number: the state after every change up to it.
    Seq(u64),
}

/// The forms WHEN takes, for error messages.
pub const FORMS: &str = "a snapshot's name, a UTC time (2026-11-27T10:00:01Z), \
                         a time ago (-90s, -5m, -2h, -1d, -1h30m) or seq:N";

/// `1h`, `30m`, `90s`, `2d`, `1h30m`: whole numbers each followed by a
/// unit (`s`, `m`, `h`, `d`), in seconds. A bare number is refused (give
/// a unit), and so is 0 of everything.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let bad =
        |why: &str| format!("`{text}` is not a duration ({why}; e.g. 90s, 30m, 1h, 1h30m, 2d)");
    if text.is_empty() {
        return Err(bad("empty"));
    }
    let mut total = 0u64;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        if digits == 0 {
            return Err(bad("a number must come before each unit"));
        }
        let n: u64 = rest[..digits]
            .parse()
            .map_err(|_| bad("a number too large"))?;
        let mut chars = rest[digits..].chars();
        let unit = match chars.next() {
            Some('s') => 1,
            Some('m') => 60,
            Some('h') => 3600,
            Some('d') => 86_400,
            Some(_) => return Err(bad("units are s, m, h and d")),
            None => return Err(bad("give a unit after the number: s, m, h or d")),
        };
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(|| bad("too long"))?;
        rest = chars.as_str();
    }
    if total == 0 {
        return Err(bad("it is 0; `off` turns the window off"));
    }
    Ok(total)
}

/// `3600` -> `1h`, `5400` -> `1h30m`, `90` -> `1m30s`.
pub fn duration_text(secs: u64) -> String {
    if secs == 0 {
        return "0s".into();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, len) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        if rest >= len {
            out.push_str(&format!("{}{unit}", rest / len));
            rest %= len;
        }
    }
    out
}

/// WHEN read as one of the forms other than a name; `None` when it is
/// none of them.
pub fn parse_when(text: &str) -> Option<When> {
    if let Some(n) = text.strip_prefix("seq:") {
        return n.parse().ok().map(When::Seq);
    }
    if let Some(d) = text.strip_prefix('-') {
        return parse_duration(d).ok().map(When::Ago);
    }
    // A point's name with no live point of that name: its time.
    let time = text.strip_prefix(POINT_PREFIX).unwrap_or(text);
    parse_rfc3339_utc(time).map(|ns| When::Time(ns / NS_PER_SEC))
}

/// A snapshot of a `snapshots` reply, with the fields resolution uses.
#[derive(Clone, Debug)]
pub struct Listed {
    pub name: String,
    pub wall_ns: u64,
    pub create_seq: u64,
    pub is_point: bool,
    /// As the reply shows it.
    pub value: Value,
}

/// The snapshots of a `snapshots` reply body.
pub fn listed(reply: &serde_json::Map<String, Value>) -> Result<Vec<Listed>, CliError> {
    let bad = |what: &str| CliError::InvalidArgument(format!("snapshots reply: {what}"));
    let list = reply
        .get("snapshots")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("no `snapshots` list"))?;
    list.iter()
        .map(|s| {
            let name = s["name"]
                .as_str()
                .ok_or_else(|| bad("a snapshot without a name"))?;
            Ok(Listed {
                name: name.to_string(),
                wall_ns: s["wall_ns"].as_u64().unwrap_or(0),
                create_seq: s["create_seq"]
                    .as_u64()
                    .ok_or_else(|| bad("a snapshot without create_seq"))?,
                is_point: name.starts_with(POINT_PREFIX),
                value: s.clone(),
            })
        })
        .collect()
}

/// How WHEN was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum By {
    /// The name of a live snapshot or point.
    Name,
    /// A time, or a time ago: the newest snapshot or point taken at or
    /// before it (to the second).
    Time,
    /// `seq:N`: the newest created at or before seq N.
    Seq,
}

/// What WHEN resolved to.
#[derive(Clone, Debug, Serialize)]
pub struct Resolved {
    /// WHEN as given.
    pub when: String,
    pub by: By,
    /// For a time or a time ago: the time looked up, RFC 3339 UTC.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub time: Option<String>,
    /// For `seq:N`: N.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// The snapshot or point, as the `snapshots` reply shows it.
    pub snapshot: Value,
    #[serde(skip)]
    pub name: String,
    #[serde(skip)]
    pub is_point: bool,
}

impl Resolved {
    /// `point "@…"` or `snapshot "name"`.
    pub fn what(&self) -> String {
        let kind = if self.is_point { "point" } else { "snapshot" };
        format!("{kind} {:?}", self.name)
    }

    /// How WHEN led there, for people.
    pub fn how(&self) -> String {
        match self.by {
            By::Name => format!("by name ({})", self.when),
            By::Time => format!(
                "the newest snapshot or point taken at or before {} ({})",
                self.time.as_deref().unwrap_or("?"),
                self.when
            ),
            By::Seq => format!(
                "the newest snapshot or point created at or before seq {}",
                self.seq.unwrap_or(0)
            ),
        }
    }

    /// When the snapshot was taken, RFC 3339 UTC, or "at an unknown time".
    pub fn taken(&self) -> String {
        match self.snapshot["created"].as_str() {
            Some(t) => t.to_string(),
            None => "at an unknown time".to_string(),
        }
    }
}

fn refused(message: String) -> CliError {
    CliError::InvalidArgument(message)
}

/// The snapshot or point `when` stands for among `list` (the live ones,
/// oldest first), `now_ns` being the wall time now: a live name first;
/// then `seq:N`, a time ago (`-5m`) or a UTC time (also written as a
/// point's name, `@TIME`). Times count to the second, as points are named
/// and listed: a snapshot taken during second T is at T.
pub fn resolve(list: &[Listed], when: &str, now_ns: u64) -> Result<Resolved, CliError> {
    let found = |s: &Listed, by: By, time: Option<u64>, seq: Option<u64>| Resolved {
        when: when.to_string(),
        by,
        time: time.map(|t| rfc3339_utc(t * NS_PER_SEC)),
        seq,
        snapshot: s.value.clone(),
        name: s.name.clone(),
        is_point: s.is_point,
    };
    if let Some(s) = list.iter().find(|s| s.name == when) {
        return Ok(found(s, By::Name, None, None));
    }
    let Some(parsed) = parse_when(when) else {
        return Err(refused(format!(
            "`{when}` is no live snapshot's name, nor a time; WHEN is {FORMS}"
        )));
    };
    let now_secs = now_ns / NS_PER_SEC;
    match parsed {
        When::Seq(n) => {
            let newest = list
                .iter()
                .filter(|s| s.create_seq <= n)
                .max_by_key(|s| s.create_seq);
            match (newest, list.iter().min_by_key(|s| s.create_seq)) {
                (Some(s), _) => Ok(found(s, By::Seq, None, Some(n))),
                (None, Some(oldest)) => Err(refused(format!(
                    "no snapshot or point was created at or before seq {n}; the oldest, {:?}, \
                     was created at seq {}",
                    oldest.name, oldest.create_seq
                ))),
                (None, None) => Err(refused(
                    "the volume holds no snapshots or points to resolve a seq to".into(),
                )),
            }
        }
        When::Time(_) | When::Ago(_) => {
            let secs = match parsed {
                When::Time(t) => {
                    if t > now_secs {
                        return Err(refused(format!(
                            "{} is in the future (it is {} now; times are UTC)",
                            rfc3339_utc(t * NS_PER_SEC),
                            rfc3339_utc(now_secs * NS_PER_SEC)
                        )));
                    }
                    t
                }
                When::Ago(ago) => now_secs.checked_sub(ago).ok_or_else(|| {
                    refused(format!("`{when}` reaches back before 1970-01-01T00:00:00Z"))
                })?,
                When::Seq(_) => unreachable!(),
            };
            let timed = list.iter().filter(|s| s.wall_ns != 0);
            let newest = timed
                .clone()
                .filter(|s| s.wall_ns / NS_PER_SEC <= secs)
                .max_by_key(|s| s.create_seq);
            if let Some(s) = newest {
                return Ok(found(s, By::Time, Some(secs), None));
            }
            let at = rfc3339_utc(secs * NS_PER_SEC);
            match timed.min_by_key(|s| s.wall_ns) {
                Some(oldest) => Err(refused(format!(
                    "nothing reaches back to {at}: the oldest reachable time is {} ({} {:?})",
                    rfc3339_utc(oldest.wall_ns),
                    if oldest.is_point { "point" } else { "snapshot" },
                    oldest.name
                ))),
                None => Err(refused(format!(
                    "nothing reaches back to {at}: no snapshot or point with a time \
                     (a server takes points with `zftl serve --protect DURATION`)"
                ))),
            }
        }
    }
}

/// The wall time now, ns since the Unix epoch.
pub fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const SEC: u64 = NS_PER_SEC;
    /// 2026-11-27T10:00:00Z.
    const T0: u64 = 1_795_773_600;

    fn snap(name: &str, wall_s: Option<(u64, u64)>, seq: u64) -> Listed {
        let wall_ns = wall_s.map_or(0, |(s, frac)| s * SEC + frac);
        Listed {
            name: name.into(),
            wall_ns,
            create_seq: seq,
            is_point: name.starts_with('@'),
            value: json!({"name": name, "wall_ns": wall_ns, "create_seq": seq}),
        }
    }

    fn list() -> Vec<Listed> {
        vec![
            snap("old", None, 2),
            snap("@2026-11-27T10:00:01Z", Some((T0 + 1, 700_000_000)), 10),
            snap("mine", Some((T0 + 2, 100)), 15),
            snap("@2026-11-27T10:00:04Z", Some((T0 + 4, 0)), 20),
            snap("2026-11-27T10:00:09Z", Some((T0 + 9, 0)), 30),
        ]
    }

    fn name_of(when: &str, now: u64) -> Result<String, String> {
        resolve(&list(), when, now * SEC + 5)
            .map(|r| r.name)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn durations_parse_with_units_only() {
        assert_eq!(parse_duration("90s"), Ok(90));
        assert_eq!(parse_duration("30m"), Ok(1800));
        assert_eq!(parse_duration("1h"), Ok(3600));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        for bad in [
            "",
            "3600",
            "1x",
            "h",
            "-1h",
            "1 h",
            "1h30",
            "0s",
            "0h0m",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert!(parse_duration("3600").unwrap_err().contains("give a unit"));
        for (secs, text) in [
            (3600, "1h"),
            (5400, "1h30m"),
            (90, "1m30s"),
            (86_401, "1d1s"),
        ] {
            assert_eq!(duration_text(secs), text);
            assert_eq!(parse_duration(text), Ok(secs));
        }
    }

    #[test]
    fn when_takes_names_first_then_the_forms() {
        let now = T0 + 100;
        // A live name, whatever it looks like.
        assert_eq!(name_of("mine", now).unwrap(), "mine");
        assert_eq!(
            name_of("2026-11-27T10:00:09Z", now).unwrap(),
            "2026-11-27T10:00:09Z"
        );
        assert_eq!(
            name_of("@2026-11-27T10:00:01Z", now).unwrap(),
            "@2026-11-27T10:00:01Z"
        );
        // A time counts to the second: the point of 10:00:01.7 is at
        // 10:00:01; 10:00:03 reaches back to "mine" (10:00:02).
        assert_eq!(
            name_of("2026-11-27T10:00:01Z", now).unwrap(),
            "@2026-11-27T10:00:01Z"
        );
        assert_eq!(name_of("2026-11-27T10:00:03Z", now).unwrap(), "mine");
        // A point's name that names no live point: its time.
        assert_eq!(
            name_of("@2026-11-27T10:00:05Z", now).unwrap(),
            "@2026-11-27T10:00:04Z"
        );
        // Ago: now (10:01:40) less 96 s is 10:00:04.
        assert_eq!(name_of("-96s", now).unwrap(), "@2026-11-27T10:00:04Z");
        assert_eq!(name_of("-1m39s", now).unwrap(), "@2026-11-27T10:00:01Z");
        let r = resolve(&list(), "-96s", now * SEC).unwrap();
        assert_eq!(r.by, By::Time);
        assert_eq!(r.time.as_deref(), Some("2026-11-27T10:00:04Z"));
        // Seq: the newest created at or before it; untimed ones count.
        assert_eq!(name_of("seq:2", now).unwrap(), "old");
        assert_eq!(name_of("seq:14", now).unwrap(), "@2026-11-27T10:00:01Z");
        assert_eq!(name_of("seq:15", now).unwrap(), "mine");
        assert_eq!(name_of("seq:99", now).unwrap(), "2026-11-27T10:00:09Z");
    }

    #[test]
    fn when_errors_say_what_is_reachable() {
        let now = T0 + 100;
        let e = name_of("2026-11-27T10:00:00Z", now).unwrap_err();
        assert!(
            e.contains("nothing reaches back to 2026-11-27T10:00:00Z")
                && e.contains("oldest reachable time is 2026-11-27T10:00:01Z")
                && e.contains("point \"@2026-11-27T10:00:01Z\""),
            "{e}"
        );
        let e = name_of("-2m", now).unwrap_err();
        assert!(
            e.contains("oldest reachable time is 2026-11-27T10:00:01Z"),
            "{e}"
        );
        let e = name_of("seq:1", now).unwrap_err();
        assert!(
            e.contains("the oldest, \"old\", was created at seq 2"),
            "{e}"
        );
        let e = name_of("2026-11-27T10:01:41Z", now).unwrap_err();
        assert!(e.contains("in the future"), "{e}");
        for bad in [
            "nope",
            "seq:",
            "seq:-1",
            "-5",
            "-5x",
            "2026-11-27 10:00:01Z",
            "2026-11-27T10:00:01+01:00",
        ] {
            let e = name_of(bad, now).unwrap_err();
            assert!(
                e.contains("no live snapshot's name") && e.contains("seq:N"),
                "{bad}: {e}"
            );
        }
        let e = resolve(&[], "seq:5", now * SEC).unwrap_err().to_string();
        assert!(e.contains("no snapshots or points"), "{e}");
        let untimed = [snap("a", None, 3)];
        let e = resolve(&untimed, "-1s", now * SEC).unwrap_err().to_string();
        assert!(e.contains("--protect"), "{e}");
    }
}
