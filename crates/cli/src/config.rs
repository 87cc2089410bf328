//! Building a `SimConfig` for `zftl sim create`: a base (the default or a
//! config file) with each command-line flag overriding one field.

use std::path::Path;

use serde_json::Value;
use zftl_sim::SimConfig;

use crate::args::CreateArgs;
use crate::error::{sim_reason, CliError};

/// The configuration `sim create` will use, validated.
pub fn from_args(args: &CreateArgs) -> Result<SimConfig, CliError> {
    let mut cfg = match &args.config {
        Some(path) => load_file(path)?,
        None => SimConfig::default(),
    };
    apply_flags(&mut cfg, args);
    cfg.validate().map_err(|e| CliError::InvalidConfig {
        reason: sim_reason(&e),
    })?;
    Ok(cfg)
}

fn apply_flags(cfg: &mut SimConfig, args: &CreateArgs) {
    fn set<T: Copy>(field: &mut T, flag: Option<T>) {
        if let Some(value) = flag {
            *field = value;
        }
    }
    set(&mut cfg.channels, args.channels);
    set(&mut cfg.luns_per_channel, args.luns_per_channel);
    set(&mut cfg.blocks_per_lun, args.blocks_per_lun);
    set(&mut cfg.pages_per_block, args.pages_per_block);
    set(&mut cfg.page_size_bytes, args.page_size_bytes);
    set(&mut cfg.oob_size_bytes, args.oob_size_bytes);
    set(&mut cfg.program_unit_pages, args.program_unit_pages);
    set(&mut cfg.zone_width_luns, args.zone_width_luns);
    set(&mut cfg.max_open_zones, args.max_open_zones);
    set(&mut cfg.max_active_zones, args.max_active_zones);
    set(&mut cfg.queue_depth, args.queue_depth);
    set(&mut cfg.endurance_erases, args.endurance_erases);
    set(
        &mut cfg.factory_bad_block_per_mille,
        args.factory_bad_block_per_mille,
    );
    set(&mut cfg.faults.seed, args.seed);
    if args.zone_size_blocks.is_some() {
        cfg.zone_size_blocks = args.zone_size_blocks;
    }
    // Transfers default to sizes that fit the default device; keep them
    // legal (non-zero multiples of the write unit, within a zone) when the
    // flags shrink the zone or change the program unit, unless the user
    // set them in a config file on purpose.
    if args.config.is_none() {
        fit_transfer_limits(cfg);
    }
}

fn fit_transfer_limits(cfg: &mut SimConfig) {
    let unit = cfg.program_unit_pages.max(1);
    let capacity = u32::try_from(cfg.zone_capacity_blocks()).unwrap_or(u32::MAX);
    let fit = |limit: u32| {
        let capped = limit.min(capacity).max(unit);
        capped - capped % unit
    };
    cfg.max_append_blocks = fit(cfg.max_append_blocks);
    cfg.max_transfer_blocks = fit(cfg.max_transfer_blocks);
}

/// Reads a TOML (or `.json`) config file. Missing fields take their
/// defaults; unknown fields are an error, so a typo is never ignored.
pub fn load_file(path: &Path) -> Result<SimConfig, CliError> {
    let fail = |reason: String| CliError::Config {
        path: path.to_path_buf(),
        reason,
    };
    let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
    let is_json = path
        .extension()
        .is_some_and(|ext| ext.eq_ignore_ascii_case("json"));
    let value: Value = if is_json {
        serde_json::from_str(&text).map_err(|e| fail(e.to_string()))?
    } else {
        let table: toml::Table =
            toml::from_str(&text).map_err(|e| fail(one_line(&e.to_string())))?;
        serde_json::to_value(table).map_err(|e| fail(e.to_string()))?
    };
    let known = serde_json::to_value(SimConfig::default()).map_err(|e| fail(e.to_string()))?;
    if let Some(field) = unknown_field(&value, &known, "") {
        return Err(fail(format!("unknown field `{field}`")));
    }
    serde_json::from_value(value).map_err(|e| fail(e.to_string()))
}

/// The first key of `value` that `known` does not have, as a dotted path.
/// Recurses only where both sides are tables.
fn unknown_field(value: &Value, known: &Value, prefix: &str) -> Option<String> {
    let (Value::Object(given), Value::Object(known)) = (value, known) else {
        return None;
    };
    for (key, sub) in given {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        match known.get(key) {
            None => return Some(path),
            Some(known_sub) => {
                let known_sub = match (known_sub, key.as_str()) {
                    // `timing` is `None` in the default; check it against a
                    // default `Timing`.
                    (Value::Null, "timing") => {
                        serde_json::to_value(zftl_sim::Timing::default()).ok()?
                    }
                    _ => known_sub.clone(),
                };
                if let Some(found) = unknown_field(sub, &known_sub, &path) {
                    return Some(found);
                }
            }
        }
    }
    None
}

/// toml's parse errors span several lines (a source excerpt with `|`
/// gutters); keep the location and the message, on one line.
fn one_line(message: &str) -> String {
    let parts: Vec<&str> = message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.contains('|'))
        .collect();
    if parts.is_empty() {
        "parse error".to_string()
    } else {
        parts.join(": ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write config");
        path
    }

    #[test]
    fn partial_toml_takes_defaults() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(
            &dir,
            "c.toml",
            "channels = 2\n[faults]\nseed = 7\n[timing]\nread_ns = 1\n",
        );
        let cfg = load_file(&path).expect("valid");
        assert_eq!(cfg.channels, 2);
        assert_eq!(cfg.faults.seed, 7);
        assert_eq!(cfg.timing.map(|t| t.read_ns), Some(1));
        assert_eq!(cfg.pages_per_block, SimConfig::default().pages_per_block);
    }

    #[test]
    fn unknown_fields_are_rejected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(&dir, "c.toml", "chanels = 2\n");
        let err = load_file(&path).expect_err("typo").to_string();
        assert!(err.contains("unknown field `chanels`"), "{err}");
        let path = write(&dir, "d.toml", "[faults]\nsed = 2\n");
        let err = load_file(&path).expect_err("typo").to_string();
        assert!(err.contains("faults.sed"), "{err}");
    }

    #[test]
    fn default_config_round_trips_through_toml() {
        let text = toml::to_string(&SimConfig::small_for_tests()).expect("serialize");
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(&dir, "c.toml", &text);
        assert_eq!(
            load_file(&path).expect("valid"),
            SimConfig::small_for_tests()
        );
    }

    #[test]
    fn bad_toml_is_one_line() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = write(&dir, "c.toml", "channels = = 2\n");
        let err = load_file(&path).expect_err("bad").to_string();
        assert!(!err.contains('\n'), "{err}");
    }
}
