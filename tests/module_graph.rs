//! The top-level modules of src/ depend on each other one way only (docs/architecture.md,
//! "Layers and dependency direction"): this test reads every production source file, collects the
//! `crate::<module>` paths each top-level module names (comments, `#[cfg(test)]` modules and
//! test-module files left out) and fails on any cycle, naming its modules and the edges that
//! close it.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Every `.rs` file under `dir`, recursively, but unit-test modules kept in their own files
/// (`tests.rs`, or anything under a `tests/` folder): test code may use any module.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "tests" {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") && name != "tests.rs" {
            out.push(p);
        }
    }
}

/// `text` without comments and without everything from the first `#[cfg(test)]` module on
/// (the project keeps its unit-test modules at the end of each file).
fn production_code(text: &str) -> String {
    let test_module = text
        .match_indices("#[cfg(test)]")
        .find(|(i, m)| text[i + m.len()..].trim_start().starts_with("mod "));
    let text = match test_module {
        Some((i, _)) => &text[..i],
        None => text,
    };
    let mut out = String::with_capacity(text.len());
    let mut in_block = 0usize;
    for line in text.lines() {
        let mut rest = line;
        let mut kept = String::new();
        loop {
            if in_block > 0 {
                match rest.find("*/") {
                    Some(i) => {
                        in_block -= 1;
                        rest = &rest[i + 2..];
                    }
                    None => break,
                }
            } else {
                let line_comment = rest.find("//");
                let block = rest.find("/*");
                match (line_comment, block) {
                    (Some(l), b) if b.is_none_or(|b| l < b) => {
                        kept.push_str(&rest[..l]);
                        break;
                    }
                    (_, Some(b)) => {
                        kept.push_str(&rest[..b]);
                        in_block += 1;
                        rest = &rest[b + 2..];
                    }
                    _ => {
                        kept.push_str(rest);
                        break;
                    }
                }
            }
        }
        out.push_str(&kept);
        out.push('\n');
    }
    out
}

/// The top-level modules (files `src/<m>.rs` but lib.rs and main.rs) each one names.
fn module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut mods: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for e in fs::read_dir(src).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if let Some(m) = name.strip_suffix(".rs") {
            if m != "lib" && m != "main" {
                mods.insert(m.to_string(), BTreeSet::new());
            }
        }
    }
    let names: Vec<String> = mods.keys().cloned().collect();
    for m in &names {
        let mut files = vec![src.join(format!("{m}.rs"))];
        rust_files(&src.join(m), &mut files);
        let mut deps = BTreeSet::new();
        for f in files {
            let code = production_code(&fs::read_to_string(&f).unwrap());
            for used in crate_paths(&code) {
                if used != *m && mods.contains_key(&used) {
                    deps.insert(used);
                }
            }
        }
        mods.insert(m.clone(), deps);
    }
    mods
}

/// The first path segment after every `crate::`, including each item of a
/// `use crate::{a::.., b, ..}` group (top level of the braces only).
fn crate_paths(code: &str) -> Vec<String> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let after = &rest[i + "crate::".len()..];
        if let Some(group) = after.strip_prefix('{') {
            let mut depth = 1;
            let mut start = true;
            for (j, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => start = true,
                    c if c.is_whitespace() => {}
                    _ if start && depth == 1 => {
                        out.push(ident(&group[j..]));
                        start = false;
                    }
                    _ => {}
                }
            }
        } else {
            out.push(ident(after));
        }
        rest = after;
    }
    out
}

/// Strongly connected components of more than one module (Tarjan's algorithm).
fn cycles(g: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct State<'a> {
        g: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on_stack: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in &s.g[v] {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for v in g.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out
}

#[test]
fn top_level_modules_depend_one_way_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let g = module_graph(&src);
    assert!(
        g.len() > 10,
        "read {} modules from {}",
        g.len(),
        src.display()
    );
    let found = cycles(&g);
    let describe: Vec<String> = found
        .iter()
        .map(|comp| {
            let edges: Vec<String> = comp
                .iter()
                .flat_map(|a| {
                    g[a].iter()
                        .filter(|b| comp.contains(b))
                        .map(move |b| format!("{a} -> {b}"))
                })
                .collect();
            format!("{{{}}}: {}", comp.join(", "), edges.join(", "))
        })
        .collect();
    assert!(
        found.is_empty(),
        "module cycles in src/ (docs/architecture.md says which way each layer depends):\n{}",
        describe.join("\n")
    );
}

#[test]
fn the_checker_sees_a_cycle_and_ignores_comments_and_tests() {
    let code = production_code(
        "use crate::{gpu::GpuProfile, model};\n// crate::plan in a comment\n/* crate::report */\n\
         fn f() { crate::sim::run(); }\n#[cfg(test)]\nmod tests { use crate::summary; }\n",
    );
    assert_eq!(crate_paths(&code), ["gpu", "model", "sim"]);
    let mut g = BTreeMap::new();
    for (a, b) in [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")] {
        g.entry(a.to_string())
            .or_insert_with(BTreeSet::new)
            .insert(b.to_string());
        g.entry(b.to_string()).or_insert_with(BTreeSet::new);
    }
    assert_eq!(cycles(&g), [vec!["a", "b", "c"]]);
}
