//! `toolgate policy validate` and `toolgate policy import`.

use std::io::Write;
use std::path::PathBuf;

use crate::adapters::import::{self, Converted, Format};
use crate::display::shown;
use crate::setup::{self, Settings};

/// `validate`: load each file as `serve` would (`base` holds the other
/// flags, the managed policies included), print each error, warning and
/// lint as `FILE: KEY: reason` (with the rules a managed policy overrides,
/// and a mode held to its floor)
/// (escaped as [`shown`] escapes: a policy's patterns may come from anywhere).
/// Exit code 2 when a file has an error, else 0.
pub fn validate(files: &[PathBuf], base: &Settings) -> u8 {
    let mut out = std::io::stdout().lock();
    let mut code = 0;
    for file in files {
        let name = file.display().to_string();
        let settings = Settings {
            policy: Some(file.clone()),
            ..base.clone()
        };
        let loaded = match setup::load(&settings) {
            Ok(loaded) => loaded,
            Err(err) => {
                code = 2;
                let _ = writeln!(out, "error: {}", shown(&err.to_string()));
                continue;
            }
        };
        let mut said = 0;
        for warning in &loaded.warnings {
            let _ = writeln!(out, "warning: {}", shown(&warning.to_string()));
            said += 1;
        }
        for lint in toolgate_policy::lint::lint(&loaded.policy) {
            let _ = writeln!(
                out,
                "warning: {}: {}: {}",
                shown(&lint.origin),
                shown(&lint.key),
                shown(&lint.message)
            );
            said += 1;
        }
        // A mode below the managed floor is held to it.
        if let (Some((floor, origin)), Some(asked)) =
            (&loaded.policy.mode_floor, loaded.configured_mode)
        {
            if loaded.policy.floored(asked) != asked {
                let _ = writeln!(
                    out,
                    "warning: {}: mode: `{asked}` is held to `{floor}`, the floor of the managed policy ({})",
                    shown(&name),
                    shown(origin)
                );
                said += 1;
            }
        }
        if said == 0 {
            let _ = writeln!(out, "ok: {}", shown(&name));
        }
    }
    code
}

/// `import`: convert `files` (each in `from`, else its detected format) and
/// print one toolgate policy; what was not converted goes to stderr. Exit
/// code 2 when nothing could be read, else 0.
pub fn import(files: &[PathBuf], from: Option<Format>, agent: Option<&str>) -> u8 {
    let mut converted = Converted::default();
    let mut read = 0;
    for file in files {
        let name = file.display().to_string();
        let text = match std::fs::read_to_string(file) {
            Ok(text) => text,
            Err(err) => {
                crate::say!("toolgate policy import: cannot read {name}: {err}");
                continue;
            }
        };
        let Some(format) = from.or_else(|| import::detect(&name, &text)) else {
            crate::say!(
                "toolgate policy import: {name}: not a format toolgate can import (give --from)"
            );
            continue;
        };
        read += 1;
        import::convert(&mut converted, format, &name, &text, agent);
    }
    for (place, why) in &converted.skipped {
        crate::say!("toolgate policy import: not converted: {place}: {why}");
    }
    if read == 0 {
        return 2;
    }
    let text = serde_json::to_string_pretty(&serde_json::Value::Object(converted.policy))
        .unwrap_or_default();
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{text}").is_err() {
        return 2;
    }
    crate::say!(
        "toolgate policy import: {} rule{} from {read} file{}",
        converted.rules,
        if converted.rules == 1 { "" } else { "s" },
        if read == 1 { "" } else { "s" }
    );
    0
}
