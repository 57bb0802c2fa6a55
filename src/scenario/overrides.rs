//! `--set key.path=value` overrides applied to a scenario's TOML table before it is read.

use crate::error::{Error, Result};

/// Applies one `key.path=value` override. The value is read as a TOML value (number, bool,
/// string, array, inline table) and falls back to a plain string.
pub fn apply_override(table: &mut toml::Table, assignment: &str) -> Result<()> {
    let origin = "--set";
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| Error::config(origin, assignment, "expected key.path=value"))?;
    let key = key.trim();
    if key.is_empty() || key.split('.').any(|p| p.trim().is_empty()) {
        return Err(Error::config(origin, key, "empty key segment"));
    }
    let value = parse_value(raw.trim());
    let parts: Vec<&str> = key.split('.').map(str::trim).collect();
    let mut cur = table;
    for (i, part) in parts.iter().enumerate() {
        if i + 1 == parts.len() {
            cur.insert(part.to_string(), value);
            return Ok(());
        }
        let entry = cur
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        cur = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err(Error::config(
                    origin,
                    parts[..=i].join("."),
                    "is not a table, cannot set a key inside it",
                ))
            }
        };
    }
    Ok(())
}

fn parse_value(raw: &str) -> toml::Value {
    let doc = format!("v = {raw}");
    match toml::from_str::<toml::Table>(&doc) {
        Ok(mut t) => t
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(raw.to_string())),
        Err(_) => toml::Value::String(raw.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_nested_and_typed_values() {
        let mut t: toml::Table = toml::from_str("[a]\nb = 1").unwrap();
        apply_override(&mut t, "a.b=2.5").unwrap();
        apply_override(&mut t, "a.c=true").unwrap();
        apply_override(&mut t, "x.y.z=hello").unwrap();
        assert_eq!(t["a"]["b"].as_float(), Some(2.5));
        assert_eq!(t["a"]["c"].as_bool(), Some(true));
        assert_eq!(t["x"]["y"]["z"].as_str(), Some("hello"));
    }

    #[test]
    fn rejects_bad_assignments() {
        let mut t: toml::Table = toml::from_str("a = 1").unwrap();
        assert!(apply_override(&mut t, "novalue").is_err());
        assert!(apply_override(&mut t, "a.b=1").is_err());
        assert!(apply_override(&mut t, "a..b=1").is_err());
    }
}
