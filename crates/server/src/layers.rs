//! The server's module layers, held to ARCHITECTURE.md: the ```layers block
//! there lists the top-level modules of `src/` layer by layer, bottom first,
//! and this test reads every `.rs` file under `src/` for the paths by which
//! one top-level module reaches another (`use crate::x`, `use crate::{a,
//! b::c}`, an inline `crate::x::..` path, a `super::` chain that climbs out
//! of its own top-level module). A module may use the modules of the layers
//! below its own, and those named before it in its own layer; so the map
//! and the code cannot disagree, and the modules cannot form a cycle.
//!
//! `lib.rs` (the crate root: it declares the modules and re-exports the
//! public entry points), `main.rs` (the binary, a crate of its own) and
//! this test are not modules of the map.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A top-level module's place: its layer's index (bottom = 0), then its
/// position in that layer's line.
type Rank = (usize, usize);

/// The layers of ARCHITECTURE.md's ```layers block: `(layer, modules)`,
/// bottom first.
fn layer_map(architecture: &str) -> Vec<(String, Vec<String>)> {
    let mut lines = architecture.lines().skip_while(|l| l.trim() != "```layers");
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no ```layers block"
    );
    lines
        .take_while(|l| l.trim() != "```")
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let mut words = l.split_whitespace();
            let layer = words.next().unwrap_or_default().trim_end_matches(':');
            (layer.to_owned(), words.map(str::to_owned).collect())
        })
        .collect()
}

/// One path from a file to another top-level module.
#[derive(Debug, PartialEq, Eq)]
struct Reference {
    line: usize,
    target: String,
}

/// Every top-level module reached from `source`, a file whose module path is
/// `module` (`["api", "enter"]` for `src/api/enter.rs`), with its line.
fn references(source: &str, module: &[String]) -> Vec<Reference> {
    let tokens = tokens(source);
    let mut found = Vec::new();
    // Inline `mod x { .. }` blocks deepen the module path a `super` climbs.
    let mut braces: Vec<Option<String>> = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let (token, line) = (&tokens[i].0, tokens[i].1);
        let path: Vec<&String> = module.iter().chain(braces.iter().flatten()).collect();
        match token.as_str() {
            "{" => {
                let inline_mod =
                    (i >= 2 && tokens[i - 2].0 == "mod").then(|| tokens[i - 1].0.clone());
                braces.push(inline_mod);
            }
            "}" => {
                braces.pop();
            }
            "crate" if next_is(&tokens, i, "::") && !after_path_separator(&tokens, i) => {
                for target in first_segments(&tokens, i + 2) {
                    found.push(Reference { line, target });
                }
            }
            "super" if !after_path_separator(&tokens, i) => {
                let mut climbs = 1;
                let mut j = i;
                while next_is(&tokens, j, "::") && tokens.get(j + 2).is_some_and(|t| t.0 == "super")
                {
                    climbs += 1;
                    j += 2;
                }
                if climbs >= path.len() && next_is(&tokens, j, "::") {
                    for target in first_segments(&tokens, j + 2) {
                        found.push(Reference { line, target });
                    }
                }
                i = j;
            }
            _ => {}
        }
        i += 1;
    }
    found
}

fn next_is(tokens: &[(String, usize)], i: usize, what: &str) -> bool {
    tokens.get(i + 1).is_some_and(|t| t.0 == what)
}

/// `a::crate` or `a::super` is not the start of a path.
fn after_path_separator(tokens: &[(String, usize)], i: usize) -> bool {
    i > 0 && tokens[i - 1].0 == "::"
}

/// The first segment of the path at `tokens[at]`, or of each item of the
/// use-tree group `{a, b::c, ..}` there.
fn first_segments(tokens: &[(String, usize)], at: usize) -> Vec<String> {
    let Some((first, _)) = tokens.get(at) else {
        return Vec::new();
    };
    if first != "{" {
        return vec![first.clone()];
    }
    let mut out = Vec::new();
    let mut depth = 0;
    let mut expect_item = true;
    for (token, _) in &tokens[at..] {
        match token.as_str() {
            "{" => {
                depth += 1;
                expect_item = depth == 1;
            }
            "}" => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
            }
            "," if depth == 1 => expect_item = true,
            t if expect_item && depth == 1 => {
                if t != "self" {
                    out.push(t.to_owned());
                }
                expect_item = false;
            }
            _ => {}
        }
    }
    out
}

/// Identifiers, `::` and punctuation marks with their line, comments and
/// string and char literals left out (a brace in a literal would otherwise
/// open a block, and a doc comment's `crate::` link is no dependency).
fn tokens(source: &str) -> Vec<(String, usize)> {
    let chars: Vec<char> = source.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    while i < chars.len() {
        let c = chars[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            }
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                if chars[i] == '\\' {
                    i += 1;
                }
                line += usize::from(at(i) == '\n');
                i += 1;
            }
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{7f}'), or else a lifetime.
            if at(i + 1) == '\\' {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                i += 1;
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            // Raw strings: r"..", r#".."#, br#".."#.
            let hashes = chars[i..].iter().take_while(|&&h| h == '#').count();
            if (word == "r" || word == "br") && at(i + hashes) == '"' {
                i += hashes + 1;
                loop {
                    if i >= chars.len() {
                        break;
                    }
                    if chars[i] == '"' && chars[i + 1..].iter().take(hashes).all(|&h| h == '#') {
                        i += 1 + hashes;
                        break;
                    }
                    line += usize::from(chars[i] == '\n');
                    i += 1;
                }
            } else if word == "b" && at(i) == '"' {
                // A byte string: the '"' branch skips it next.
            } else {
                out.push((word, line));
            }
        } else if c == ':' && at(i + 1) == ':' {
            out.push(("::".to_owned(), line));
            i += 2;
        } else {
            // Every other punctuation mark separates paths (`size_of::<crate::x>`).
            if !c.is_whitespace() {
                out.push((c.to_string(), line));
            }
            i += 1;
        }
    }
    out
}

/// Every `.rs` file under `dir`, sorted.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The module path of a file under `src/`: `api/enter.rs` is `api::enter`.
fn module_path(relative: &Path) -> Vec<String> {
    relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn the_modules_use_only_what_the_layers_in_architecture_md_allow() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let src = manifest.join("src");
    let architecture = std::fs::read_to_string(manifest.join("../../ARCHITECTURE.md")).unwrap();
    let layers = layer_map(&architecture);
    let mut rank: BTreeMap<String, Rank> = BTreeMap::new();
    let mut problems = Vec::new();
    for (l, (layer, modules)) in layers.iter().enumerate() {
        for (p, m) in modules.iter().enumerate() {
            if rank.insert(m.clone(), (l, p)).is_some() {
                problems.push(format!("ARCHITECTURE.md: {m} is in more than one place"));
            }
        }
        assert!(
            !modules.is_empty(),
            "ARCHITECTURE.md: layer {layer} names no module"
        );
    }
    let layer_of = |m: &str| rank.get(m).map_or("?", |r| layers[r.0].0.as_str());

    let files: Vec<(PathBuf, Vec<String>)> = rust_files(&src)
        .into_iter()
        .map(|f| {
            let module = module_path(f.strip_prefix(&src).unwrap());
            (f, module)
        })
        .filter(|(_, m)| !matches!(m[0].as_str(), "lib" | "main" | "layers"))
        .collect();
    let present: BTreeSet<&String> = files.iter().map(|(_, m)| &m[0]).collect();
    for m in &present {
        if !rank.contains_key(*m) {
            problems.push(format!(
                "src/{m}: a top-level module the ```layers block of ARCHITECTURE.md does not place"
            ));
        }
    }
    for m in rank.keys() {
        if !present.contains(m) {
            problems.push(format!(
                "ARCHITECTURE.md places {m}, which is not a module of src/"
            ));
        }
    }

    let mut edges: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    for (file, module) in &files {
        let from = module[0].as_str();
        let source = std::fs::read_to_string(file).unwrap();
        let shown = file.strip_prefix(manifest).unwrap().display();
        for r in references(&source, module) {
            if r.target == from {
                continue;
            }
            let (Some(a), Some(b)) = (rank.get(from), rank.get(&r.target)) else {
                if !present.contains(&r.target) {
                    problems.push(format!(
                        "{shown}:{}: crate::{} is not a top-level module; name the module that owns it",
                        r.line, r.target
                    ));
                }
                continue;
            };
            edges.entry(from).or_default().insert(r.target.clone());
            if b >= a {
                problems.push(format!(
                    "{shown}:{}: {from} ({}) uses {} ({}), which only modules above it may use",
                    r.line,
                    layer_of(from),
                    r.target,
                    layer_of(&r.target),
                ));
            }
        }
    }
    if let Some(cycle) = find_cycle(&edges) {
        problems.push(format!("modules in a cycle: {}", cycle.join(" -> ")));
    }
    assert!(
        problems.is_empty(),
        "module layers broken (see ARCHITECTURE.md, \"Module layers\"):\n{}",
        problems.join("\n")
    );
}

/// A cycle among the modules, as a path that ends where it starts.
fn find_cycle(edges: &BTreeMap<&str, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        m: &str,
        edges: &BTreeMap<&str, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == m) {
            let mut cycle = path[at..].to_vec();
            cycle.push(m.to_owned());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_owned());
        for next in edges.get(m).into_iter().flatten() {
            if let Some(c) = visit(next, edges, done, path) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|m| visit(m, edges, &mut done, &mut Vec::new()))
}

#[test]
fn every_way_of_naming_another_module_is_found() {
    let check = |source: &str, module: &[&str], expected: &[(usize, &str)]| {
        let module: Vec<String> = module.iter().map(|s| (*s).to_owned()).collect();
        let got: Vec<(usize, String)> = references(source, &module)
            .into_iter()
            .map(|r| (r.line, r.target))
            .collect();
        let expected: Vec<(usize, String)> = expected
            .iter()
            .map(|(l, t)| (*l, (*t).to_owned()))
            .collect();
        assert_eq!(got, expected, "{source}");
    };
    check("use crate::state::AppState;", &["api"], &[(1, "state")]);
    check(
        "use crate::{clock::Clock, locks, self};",
        &["api"],
        &[(1, "clock"), (1, "locks")],
    );
    check(
        "use crate::{\n    a::{b, c},\n    d,\n};",
        &["x"],
        &[(1, "a"), (1, "d")],
    );
    check(
        "fn f() { crate::drain::of(rt); }",
        &["api", "enter"],
        &[(1, "drain")],
    );
    check(
        "size_of::<crate::state::AppState>()",
        &["clock"],
        &[(1, "state")],
    );
    check("let x = anteroom::crate_like::y;", &["api"], &[]);
    // A `super` chain that climbs to the crate root names a top-level module;
    // one that stays inside its own module does not.
    check(
        "use super::super::drain::of;",
        &["api", "enter"],
        &[(1, "drain")],
    );
    check("use super::Status;", &["api", "enter"], &[]);
    check(
        "use super::{drain, queue};",
        &["api"],
        &[(1, "drain"), (1, "queue")],
    );
    check(
        "mod tests {\n    use super::*;\n    use super::super::gate;\n}",
        &["api"],
        &[(3, "gate")],
    );
    // Comments and literals are not code.
    check(
        "// crate::drain\n/// [`crate::gate`]\n/* crate::api */ let s = \"crate::push\";\nlet c = '{'; crate::queue::x();",
        &["api"],
        &[(4, "queue")],
    );
    check(
        "let r = r#\"crate::push { \"#;\ncrate::queue::x();",
        &["api"],
        &[(2, "queue")],
    );
}

#[test]
fn the_layer_block_reads_bottom_first() {
    let map = layer_map("text\n```layers\nleaf:  a b\n\ntop:   c\n```\nmore\n");
    assert_eq!(
        map,
        vec![
            ("leaf".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
            ("top".to_owned(), vec!["c".to_owned()]),
        ]
    );
}
