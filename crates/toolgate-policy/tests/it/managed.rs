//! The managed layers: applied after every other layer, each judged on its
//! own; a managed deny or ask is final (no later rule, override, grant,
//! `auto` or answer to another question loosens it), a managed question
//! offers no `always`, a managed allow only excepts from its own layer, and
//! a managed `mode` is a floor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)] // tests may panic

use std::path::PathBuf;

use serde_json::{json, Value};
use toolgate_policy::{
    lint, Call, Context, GrantPattern, GrantSpec, Grants, Mode, Policy, PolicyFile, Sources,
};

/// A policy file at `policy.json`, `--permission` and managed policies
/// (`managed:m1.json`, `managed:m2.json`, ...).
fn policy(file: Option<Value>, flag: Option<Value>, managed: &[Value]) -> Policy {
    let file = file.map(|value| {
        (
            "policy.json".to_string(),
            PolicyFile::parse(&value.to_string(), "policy.json").unwrap(),
        )
    });
    let managed = managed
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let origin = format!("managed:m{}.json", i + 1);
            let file = PolicyFile::parse_managed(&value.to_string(), &origin).unwrap();
            (origin, file)
        })
        .collect();
    Policy::build(Sources {
        project_root: PathBuf::from("/work/project"),
        home: Some(PathBuf::from("/home/me")),
        file,
        overrides: flag
            .map(|flag| vec![("--permission".to_string(), flag)])
            .unwrap_or_default(),
        managed,
        ..Sources::default()
    })
    .unwrap()
    .0
}

/// The answer as `ACTION SOURCE [PERMISSION:PATTERN@ORIGIN] [always ...]`.
fn render(
    policy: &Policy,
    mode: Mode,
    grant: Option<(&str, &str)>,
    approve: Option<(&str, &str)>,
    tool: &str,
    input: Value,
) -> String {
    let mut grants = Grants::default();
    if let Some((permission, pattern)) = grant {
        let pattern = match pattern.strip_suffix('*') {
            Some(prefix) => GrantPattern::prefixed(prefix, "*"),
            None => GrantPattern::exact(pattern),
        };
        grants.add("grant_1".to_string(), &GrantSpec::new(permission, pattern));
    }
    let approvals: Vec<(String, String)> = approve
        .map(|(p, s)| vec![(p.to_string(), s.to_string())])
        .unwrap_or_default();
    let input = input.as_object().unwrap().clone();
    let evaluation = policy.evaluate(
        &Call {
            tool,
            input: &input,
            cwd: None,
        },
        &Context {
            approvals: &approvals,
            ..Context::new(mode, &grants)
        },
    );
    let mut out = format!("{} {:?}", evaluation.action.as_str(), evaluation.source).to_lowercase();
    if let Some(rule) = &evaluation.rule {
        out.push_str(&format!(
            " {}:{}@{}",
            rule.permission, rule.pattern, rule.origin
        ));
    }
    if let Some(question) = &evaluation.question {
        out.push_str(&format!(" always {:?}", question.always));
        assert_eq!(question.managed.is_some(), question.always.is_empty());
        assert_eq!(question.grants.is_empty(), question.always.is_empty());
    }
    out
}

/// The mode, a session grant, an approval of the call, the command, the answer.
type Case<'a> = (
    Mode,
    Option<(&'a str, &'a str)>,
    Option<(&'a str, &'a str)>,
    &'a str,
    &'a str,
);

fn bash(command: &str) -> Value {
    json!({ "command": command })
}

#[test]
fn a_managed_deny_or_ask_is_final() {
    let managed = [json!({"permission": {"bash": {"git push *": "deny", "npm publish *": "ask"}}})];
    let loose = policy(
        Some(json!({"permission": {"bash": {"*": "allow"}}})),
        Some(json!({"bash": {"git push *": "allow", "npm publish *": "allow"}})),
        &managed,
    );
    let deny = "deny rule bash:git push *@managed:m1.json";
    let ask = "ask rule bash:npm publish *@managed:m1.json always []";
    #[rustfmt::skip]
    let cases: Vec<Case> = vec![
        // The override allows; the managed deny decides, in every mode.
        (Mode::Ask, None, None, "git push origin", deny),
        (Mode::Auto, None, None, "git push origin", deny),
        // Neither a grant nor an approval of this very call lifts it.
        (Mode::Ask, Some(("bash", "git push *")), None, "git push origin", deny),
        (Mode::Ask, None, Some(("bash", "git push origin")), "git push origin", deny),
        // Inside a wrapper or a script, too.
        (Mode::Ask, None, None, "env A=1 git push origin", deny),
        (Mode::Ask, None, None, "ls && bash -c 'git push origin'", deny),
        // A managed ask asks, in `auto` too, whatever a grant says, and
        // offers no `always`.
        (Mode::Ask, None, None, "npm publish --tag x", ask),
        (Mode::Auto, None, None, "npm publish --tag x", ask),
        (Mode::Ask, Some(("bash", "npm publish *")), None, "npm publish --tag x", ask),
        // The approval of this very call (the answer to its question) allows it.
        (Mode::Ask, None, Some(("bash", "npm publish --tag x")), "npm publish --tag x", "allow user"),
        // Elsewhere the other layers decide.
        (Mode::Ask, None, None, "git status", "allow rule bash:*@policy.json"),
        (Mode::Ask, None, None, "npm test", "allow rule bash:*@policy.json"),
    ];
    for (mode, grant, approve, command, expected) in cases {
        let got = render(&loose, mode, grant, approve, "Bash", bash(command));
        assert_eq!(got, expected, "{mode} {grant:?} {approve:?} {command}");
    }
}

#[test]
fn a_stricter_other_layer_still_decides() {
    // A user deny beats a managed ask; a user ask does not soften a managed one.
    let p = policy(
        Some(json!({"permission": {"bash": {"rm *": "deny", "git *": "ask"}}})),
        None,
        &[json!({"permission": {"bash": {"rm *": "ask", "git *": "ask"}}})],
    );
    assert_eq!(
        render(&p, Mode::Ask, None, None, "Bash", bash("rm x")),
        "deny rule bash:rm *@policy.json"
    );
    assert_eq!(
        render(
            &p,
            Mode::Ask,
            Some(("bash", "git *")),
            None,
            "Bash",
            bash("git commit")
        ),
        "ask rule bash:git *@managed:m1.json always []"
    );
}

#[test]
fn a_managed_allow_only_excepts_from_its_own_layer() {
    let managed = [
        json!({"permission": {"bash": {"*": "deny", "git status": "allow", "ls *": "allow"}}}),
        json!({"permission": {"bash": {"ls *": "ask"}}}),
    ];
    let p = policy(
        Some(json!({"permission": {"bash": {"git status": "ask"}}})),
        None,
        &managed,
    );
    // Excepted from m1's deny: the other layers decide (the file asks).
    assert_eq!(
        render(&p, Mode::Ask, None, None, "Bash", bash("git status")),
        "ask rule bash:git status@policy.json always [\"git status *\"]"
    );
    // m1 excepts `ls`, m2 still asks: a managed layer cannot except from another.
    assert_eq!(
        render(&p, Mode::Ask, None, None, "Bash", bash("ls -la")),
        "ask rule bash:ls *@managed:m2.json always []"
    );
    assert_eq!(
        render(&p, Mode::Auto, None, None, "Bash", bash("echo hi")),
        "deny rule bash:*@managed:m1.json"
    );
    // A managed allow alone loosens nothing.
    let p = policy(None, None, &[json!({"permission": {"edit": "allow"}})]);
    assert_eq!(
        render(
            &p,
            Mode::Ask,
            None,
            None,
            "Edit",
            json!({"file_path": "a.rs"})
        ),
        "ask mode always [\"*\"]"
    );
}

#[test]
fn a_command_whose_program_cannot_be_known_meets_managed_rules() {
    let p = policy(
        Some(json!({"permission": {"bash": {"*": "allow"}}})),
        None,
        &[json!({"permission": {"bash": {"rm *": "deny"}}})],
    );
    assert_eq!(
        render(&p, Mode::Auto, None, None, "Bash", bash("\"$RM\" -rf x")),
        "deny rule bash:rm *@managed:m1.json"
    );
}

#[test]
fn the_managed_mode_is_a_floor() {
    let p = policy(
        Some(json!({"mode": "auto"})),
        None,
        &[json!({"mode": "ask"}), json!({"mode": "auto_edit"})],
    );
    assert_eq!(p.default_mode, Mode::Ask);
    assert_eq!(
        p.mode_floor,
        Some((Mode::Ask, "managed:m1.json".to_string()))
    );
    assert_eq!(p.floored(Mode::Auto), Mode::Ask);
    assert_eq!(p.floored(Mode::Plan), Mode::Plan);
    // A session said to be in `auto` is judged in `ask`.
    assert_eq!(
        render(
            &p,
            Mode::Auto,
            None,
            None,
            "Edit",
            json!({"file_path": "a.rs"})
        ),
        "ask mode always [\"*\"]"
    );
}

#[test]
fn a_managed_policy_takes_only_mode_and_permission() {
    let err = |text: &str| {
        PolicyFile::parse_managed(text, "managed:/etc/m.json")
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    assert_eq!(
        err(r#"{"permission":{},"tools":{"x":{"kind":"read"}}}"#),
        "managed:/etc/m.json: tools: not taken in a managed policy; a managed policy takes only `mode` (a floor) and `permission`"
    );
    assert_eq!(
        err(r#"{"mdoe":"ask"}"#),
        "managed:/etc/m.json: mdoe: unknown key; a managed policy takes only `mode` (a floor) and `permission`"
    );
    assert_eq!(
        err(r#"{"permission":{"bash":"alow"}}"#),
        "managed:/etc/m.json: permission.bash: unknown action `alow` (expected allow, ask or deny)"
    );
    assert!(
        PolicyFile::parse_managed(r#"{"mode":"plan","permission":{"bash":"ask"}}"#, "m").is_ok()
    );
}

#[test]
fn a_known_tool_cannot_be_redeclared_under_a_managed_policy() {
    let file = PolicyFile::parse(
        r#"{"tools":{"Bash":{"kind":"read","permission":"harmless"}}}"#,
        "policy.json",
    )
    .unwrap();
    let managed = PolicyFile::parse_managed(r#"{"permission":{"bash":"deny"}}"#, "m").unwrap();
    let built = Policy::build(Sources {
        project_root: PathBuf::from("/p"),
        file: Some(("policy.json".to_string(), file.clone())),
        managed: vec![("managed:m".to_string(), managed)],
        ..Sources::default()
    });
    assert_eq!(
        built.map(|_| ()).unwrap_err().to_string(),
        "policy.json: tools.Bash: `Bash` is a tool toolgate knows (kind shell, permission `bash`), and a managed policy (managed:m) is in force: redeclared, it could leave the reach of the managed rules"
    );
    // Without a managed policy it is the user's to declare.
    assert!(Policy::build(Sources {
        project_root: PathBuf::from("/p"),
        file: Some(("policy.json".to_string(), file)),
        ..Sources::default()
    })
    .is_ok());
}

#[test]
fn validate_names_what_the_managed_policy_overrides() {
    let p = policy(
        Some(json!({"permission": {"bash": {"*": "ask", "git push *": "allow"}, "edit": "ask"}})),
        Some(json!({"bash": {"npm publish *": "allow"}})),
        &[
            json!({"permission": {"bash": {"git *": "deny", "npm *": "ask", "npm test": "allow"}, "webfetch": {"x": "allow"}}}),
        ],
    );
    let lints: Vec<String> = lint::lint(&p)
        .into_iter()
        .map(|lint| format!("{} {}: {}", lint.origin, lint.key, lint.message))
        .collect();
    assert_eq!(
        lints,
        vec![
            "policy.json permission.bash.\"*\": `bash: *` ask is overridden by the managed `bash: git *` deny (managed:m1.json) wherever that matches: a managed deny or ask is final",
            "policy.json permission.bash.\"git push *\": `bash: git push *` allow is overridden by the managed `bash: git *` deny (managed:m1.json) for every subject it matches: a managed deny or ask is final, so it never allows",
            "--permission permission.bash.\"npm publish *\": `bash: npm publish *` allow is overridden by the managed `bash: npm *` ask (managed:m1.json) for every subject it matches: a managed deny or ask is final, so it never allows",
            "managed:m1.json permission.webfetch.x: `webfetch: x` allow changes nothing: a managed allow only makes an exception to the earlier deny and ask rules of its own managed policy, and none of them overlaps it; it never allows what another layer asks or denies",
        ]
    );
}
