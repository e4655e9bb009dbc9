//! Properties of sub-session scopes over random ancestor chains and random calls:
//! a child never allows what an ancestor denies, layers combine as an AND (so
//! their order and grouping change nothing), and the effective scope shown to
//! clients does not depend on the order of the layers.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::collections::BTreeSet;
use std::path::PathBuf;

use proptest::prelude::*;
use serde_json::{json, Value};
use toolgate_policy::{
    Action, Call, Context, Grants, Mode, Policy, Scope, ScopeLayer, ScopeRules, Source, Sources,
};

const TOOLS: &[&str] = &[
    "Read",
    "read",
    "Edit",
    "Write",
    "Bash",
    "shell",
    "Grep",
    "Glob",
    "WebFetch",
    "Task",
    "TodoWrite",
    "exit_plan_mode",
    "mcp__docs__search",
    "mcp__git__push",
];
const TOOL_ENTRIES: &[&str] = &[
    "Read",
    "read",
    "Edit",
    "edit",
    "write",
    "Bash",
    "bash",
    "Grep",
    "grep",
    "glob",
    "WebFetch",
    "webfetch",
    "task",
    "mcp__docs__*",
    "mcp__*",
    "*",
    "TodoWrite",
];
const FILE_PATTERNS: &[&str] = &[
    "src/**",
    "docs/**",
    "*.md",
    "src/*.rs",
    "**",
    "README.md",
    "/tmp/**",
    "src/**/*.rs",
];
const COMMAND_PATTERNS: &[&str] = &[
    "git *",
    "git status *",
    "git diff *",
    "cargo *",
    "cargo test *",
    "ls *",
    "*",
    "rm *",
];
/// The same sorts of limits as regular expressions (`"patternSyntax": "regex"`).
const REGEX_FILE_PATTERNS: &[&str] = &[
    "src/.*",
    "docs/.*",
    ".*\\.md",
    "src/[^/]*\\.rs",
    ".*",
    "README\\.md",
    "/tmp/.*",
];
const REGEX_COMMAND_PATTERNS: &[&str] = &[
    "git .*",
    "git status.*",
    "cargo( .*)?",
    "ls( .*)?",
    ".*",
    "rm .*",
];
const PATHS: &[&str] = &[
    "src/a.rs",
    "src/x/y.rs",
    "docs/a.md",
    "README.md",
    "/etc/passwd",
    "Cargo.toml",
    "/tmp/t",
];
const COMMANDS: &[&str] = &[
    "git status",
    "git push origin main",
    "cargo test -p x",
    "cargo build",
    "ls -la",
    "rm -rf target",
    "git status && rm -rf target",
    "git diff | grep x",
];

fn policy() -> Policy {
    let mut policy = Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        ..Sources::default()
    })
    .unwrap()
    .0;
    policy.shell.repo_oracle = Some(std::sync::Arc::new(toolgate_shell::AssumeOwnRepository));
    policy
}

fn subset(pool: &'static [&'static str]) -> impl Strategy<Value = Vec<String>> {
    proptest::sample::subsequence(pool, 0..=4)
        .prop_map(|items| items.into_iter().map(str::to_string).collect())
}

fn rules() -> impl Strategy<Value = ScopeRules> {
    (
        proptest::option::weighted(0.5, subset(TOOL_ENTRIES)),
        proptest::option::weighted(0.4, subset(TOOL_ENTRIES)),
        proptest::bool::weighted(0.3),
        proptest::option::weighted(0.5, (subset(FILE_PATTERNS), subset(REGEX_FILE_PATTERNS))),
        proptest::option::weighted(
            0.5,
            (subset(COMMAND_PATTERNS), subset(REGEX_COMMAND_PATTERNS)),
        ),
    )
        .prop_map(
            |(allowed_tools, denied_tools, regex, file_patterns, command_patterns)| {
                let pick = |(glob, regex_list): (Vec<String>, Vec<String>)| {
                    if regex {
                        regex_list
                    } else {
                        glob
                    }
                };
                ScopeRules {
                    allowed_tools,
                    denied_tools,
                    file_patterns: file_patterns.map(pick),
                    command_patterns: command_patterns.map(pick),
                    pattern_syntax: regex.then(|| "regex".to_string()),
                }
            },
        )
}

fn chain() -> impl Strategy<Value = Vec<ScopeRules>> {
    proptest::collection::vec(rules(), 1..=4)
}

/// A tool and an input that suits it.
fn call() -> impl Strategy<Value = (String, Value)> {
    (
        proptest::sample::select(TOOLS),
        proptest::sample::select(PATHS),
        proptest::sample::select(COMMANDS),
        proptest::option::of(proptest::sample::select(&["src", "docs", ".", "/tmp"][..])),
    )
        .prop_map(|(tool, path, command, dir)| {
            let input = match tool {
                "Read" | "read" | "Edit" | "Write" => {
                    json!({"file_path": path, "old_string": "a", "new_string": "b", "content": "x"})
                }
                "Bash" | "shell" => json!({"command": command}),
                "Grep" | "Glob" => match dir {
                    Some(dir) => json!({"pattern": "TODO", "path": dir}),
                    None => json!({"pattern": "TODO"}),
                },
                "WebFetch" => json!({"url": "https://docs.rs/x"}),
                "Task" => json!({"prompt": "go"}),
                "exit_plan_mode" => json!({"plan": "p"}),
                _ => json!({"query": "q", "todos": []}),
            };
            (tool.to_string(), input)
        })
}

fn layers(policy: &Policy, chain: &[ScopeRules]) -> Vec<ScopeLayer> {
    chain
        .iter()
        .enumerate()
        .map(|(i, rules)| policy.scope_layer(&format!("s{i}"), rules.clone()).unwrap())
        .collect()
}

/// The action and whether the scope decided, in auto mode (where nothing but
/// a scope or a configured rule denies).
fn judge(policy: &Policy, scope: &Scope, tool: &str, input: &Value) -> (Action, bool) {
    let grants = Grants::default();
    let evaluation = policy.evaluate(
        &Call {
            tool,
            input: input.as_object().unwrap(),
            cwd: None,
        },
        &Context {
            scope,
            ..Context::new(Mode::Auto, &grants)
        },
    );
    (evaluation.action, evaluation.source == Source::Scope)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn a_child_never_allows_what_an_ancestor_denies(chain in chain(), (tool, input) in call()) {
        let policy = policy();
        let layers = layers(&policy, &chain);
        let full = judge(&policy, &Scope::from_layers(layers.clone()), &tool, &input);
        for i in 0..layers.len() {
            // Any ancestor chain (a prefix), and any single layer on its own.
            let prefix = judge(&policy, &Scope::from_layers(layers[..=i].to_vec()), &tool, &input);
            let alone = judge(&policy, &Scope::from_layers([layers[i].clone()]), &tool, &input);
            prop_assert!(full.0 >= prefix.0, "prefix {i} gave {prefix:?}, the child {full:?}");
            prop_assert!(full.0 >= alone.0, "layer {i} gave {alone:?}, the child {full:?}");
            if prefix.1 || alone.1 {
                prop_assert!(full.0 == Action::Deny && full.1, "layer {i} refused; the child gave {full:?}");
            }
        }
    }

    #[test]
    fn layers_combine_as_an_and(chain in chain(), (tool, input) in call()) {
        // The chain's answer is the strictest of each layer's alone, so it does
        // not depend on how the layers are grouped or ordered.
        let policy = policy();
        let layers = layers(&policy, &chain);
        let full = judge(&policy, &Scope::from_layers(layers.clone()), &tool, &input);
        let unscoped = judge(&policy, &Scope::NONE, &tool, &input);
        let strictest = layers
            .iter()
            .map(|layer| judge(&policy, &Scope::from_layers([layer.clone()]), &tool, &input).0)
            .fold(unscoped.0, Action::max);
        prop_assert_eq!(full.0, strictest);
        let reversed = judge(&policy, &Scope::from_layers(layers.iter().rev().cloned()), &tool, &input);
        prop_assert_eq!(full, reversed);
    }

    #[test]
    fn the_effective_scope_does_not_depend_on_order(chain in chain()) {
        let policy = policy();
        let permission_of = |tool: &str| policy.registry.lookup(tool).permission.clone();
        let forward = Scope::from_layers(layers(&policy, &chain)).effective(permission_of);
        let backward = Scope::from_layers(layers(&policy, &chain).into_iter().rev()).effective(permission_of);
        let set = |list: &Option<Vec<String>>| list.as_ref().map(|l| l.iter().cloned().collect::<BTreeSet<_>>());
        prop_assert_eq!(set(&forward.allowed_tools), set(&backward.allowed_tools));
        let denied = |list: &[String]| list.iter().cloned().collect::<BTreeSet<_>>();
        prop_assert_eq!(denied(&forward.denied_tools), denied(&backward.denied_tools));
        let layers_of = |list: &[Vec<String>]| {
            let mut list = list.to_vec();
            list.sort();
            list
        };
        prop_assert_eq!(layers_of(&forward.file_patterns), layers_of(&backward.file_patterns));
        prop_assert_eq!(layers_of(&forward.command_patterns), layers_of(&backward.command_patterns));
    }
}

/// The effective `allowedTools` holds only entries every limiting layer admits.
#[test]
fn effective_allowed_tools_are_admitted_by_every_layer() {
    let policy = policy();
    let permission_of = |tool: &str| policy.registry.lookup(tool).permission.clone();
    let cases: &[(&[&[&str]], &[&str])] = &[
        // Entries are matched by permission name across agents.
        (
            &[&["Read", "Bash"], &["read", "bash", "Edit"]],
            &["Read", "Bash", "read", "bash"],
        ),
        (
            &[
                &["Read", "shell"],
                &["read_file", "view_image", "run_shell_command", "Write"],
            ],
            &[
                "Read",
                "shell",
                "read_file",
                "view_image",
                "run_shell_command",
            ],
        ),
        (
            &[&["*"], &["Read", "mcp__docs__search"]],
            &["Read", "mcp__docs__search"],
        ),
        (
            &[&["mcp__docs__*"], &["mcp__docs__search", "Read"]],
            &["mcp__docs__search"],
        ),
        (&[&["Read"], &["Edit"]], &[]),
    ];
    for (layers, expected) in cases {
        let scope = Scope::from_layers(layers.iter().enumerate().map(|(i, allowed)| {
            policy
                .scope_layer(
                    &format!("s{i}"),
                    ScopeRules {
                        allowed_tools: Some(allowed.iter().map(|s| s.to_string()).collect()),
                        ..ScopeRules::default()
                    },
                )
                .unwrap()
        }));
        let effective: Vec<String> = scope.effective(permission_of).allowed_tools.unwrap();
        let mut got: Vec<&str> = effective.iter().map(String::as_str).collect();
        got.sort();
        let mut want = expected.to_vec();
        want.sort();
        assert_eq!(got, want, "{layers:?}");
    }
}
