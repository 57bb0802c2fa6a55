//! The plan's index.html as a user sees it: headless Chromium loads it, its script runs
//! without an error, the candidates table is there with every candidate, and sorting (here by
//! the URL fragment `#sort=usd_per_hour:desc`) puts the dearest candidate first. Skipped, with
//! a notice, without `chromium` on PATH; in CI (`SERVESIM_CI`, set by `.ci/run`, which installs
//! it) a missing browser fails.

mod common;

use std::path::Path;
use std::process::Command;

use common::servesim;

fn chromium() -> Option<String> {
    ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new("sh")
                .args(["-c", &format!("command -v {b}")])
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .map(String::from)
}

/// The DOM after the page's scripts ran.
fn dump_dom(browser: &str, page: &Path, fragment: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("timeout")
        .arg("120")
        .arg(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg("--dump-dom")
        .arg(format!("file://{}{fragment}", page.display()))
        .output()
        .expect("the browser runs");
    assert!(
        out.status.success(),
        "{browser} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The `data-v` values of the candidates table's rows, column `col` (0-based), in DOM order.
fn column(dom: &str, col: usize) -> Vec<String> {
    let table = &dom[dom.find("id=\"candidates\"").expect("the candidates table")..];
    let body = &table[table.find("<tbody>").expect("a table body")..];
    let body = &body[..body.find("</tbody>").unwrap()];
    body.split("<tr ")
        .skip(1)
        .map(|row| {
            row.split("<td")
                .skip(1)
                .nth(col)
                .and_then(|cell| cell.split("data-v=\"").nth(1))
                .and_then(|v| v.split('"').next())
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

#[test]
fn the_report_page_loads_sorts_and_has_no_script_error() {
    let Some(browser) = chromium() else {
        common::skip_or_fail("chromium is not on PATH");
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("report");
    let (code, out, err) = servesim(&[
        "plan",
        "--format",
        "json",
        "--out",
        report.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let plan: serde_json::Value = serde_json::from_str(&out).unwrap();
    let n = plan["candidates"].as_array().unwrap().len();
    let page = report.join("index.html");

    let dom = dump_dom(&browser, &page, "");
    // The script marks the root element: data-ready when it ran, data-script-error on an error.
    let root = &dom[dom.find("<html").unwrap()..];
    let root = &root[..root.find('>').unwrap()];
    assert!(
        root.contains("data-ready=\"1\""),
        "the script did not finish: {root}"
    );
    assert!(
        !root.contains("data-script-error"),
        "a script error: {root}"
    );
    assert!(dom.contains("id=\"candidates\"") && dom.contains("id=\"summary\""));
    // Every plot the page shows is there and decodes.
    let images = root
        .split("data-images=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or_else(|| panic!("the load handler did not run: {root}"));
    let (loaded, total) = images.split_once('/').unwrap();
    assert!(
        total.parse::<u32>().unwrap() >= 5,
        "too few plots: {images}"
    );
    assert_eq!(loaded, total, "plots that did not load: {images}");
    let ranks = column(&dom, 0);
    assert_eq!(ranks.len(), n, "one row per candidate");
    assert_eq!(ranks[0], "1");

    // Sorted by $/hour, dearest first (column 11; rows without a cost sort last).
    let dom = dump_dom(&browser, &page, "#sort=usd_per_hour:desc");
    assert!(dom.contains("aria-sort=\"descending\""));
    let costs: Vec<f64> = column(&dom, 11)
        .iter()
        .filter_map(|v| v.parse().ok())
        .collect();
    assert!(costs.len() > 1);
    assert!(
        costs.windows(2).all(|w| w[0] >= w[1]),
        "not sorted descending: {costs:?}"
    );
    let max = plan["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["status"] != "infeasible")
        .filter_map(|c| c["cost_at_target"]["usd_per_hour"].as_f64())
        .fold(0.0f64, f64::max);
    assert_eq!(costs[0], max);
}

#[test]
fn without_chromium_the_page_test_fails_in_ci() {
    let (passed, out) = common::rerun_in_ci_without_tools(
        "the_report_page_loads_sorts_and_has_no_script_error",
        &[],
    );
    assert!(!passed && out.contains(common::CI_VAR), "{out}");
}
