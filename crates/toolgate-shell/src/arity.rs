//! `always` patterns: the arity prefix of a command plus ` *`, with
//! OpenCode's arity table; destructive or code-running programs are never
//! widened.

use crate::syntax::Item;

/// How many words name the command, for a prefix of one to three words.
fn arity(prefix: &str) -> Option<usize> {
    Some(match prefix {
        "cat" | "cd" | "chmod" | "chown" | "cp" | "echo" | "env" | "export" | "grep" | "ionice"
        | "kill" | "killall" | "ln" | "ls" | "mkdir" | "mv" | "nice" | "nohup" | "ps" | "pwd"
        | "rm" | "rmdir" | "sleep" | "source" | "stdbuf" | "sudo" | "tail" | "time" | "timeout"
        | "touch" | "unset" | "watch" | "which" | "xargs" => 1,
        "bazel" | "brew" | "bun" | "cargo" | "cdk" | "cf" | "cmake" | "composer" | "consul"
        | "crictl" | "deno" | "docker" | "eksctl" | "firebase" | "flyctl" | "git" | "go"
        | "gradle" | "helm" | "heroku" | "hugo" | "ip" | "kind" | "kubectl" | "kustomize"
        | "make" | "mc" | "minikube" | "mongosh" | "mysql" | "mvn" | "ng" | "npm" | "nvm"
        | "nx" | "openssl" | "pip" | "pipenv" | "pnpm" | "poetry" | "podman" | "psql"
        | "pulumi" | "pyenv" | "python" | "rake" | "rbenv" | "redis-cli" | "rustup"
        | "serverless" | "skaffold" | "sls" | "sst" | "swift" | "systemctl" | "terraform"
        | "tmux" | "turbo" | "ufw" | "vault" | "vercel" | "volta" | "wp" | "yarn" => 2,
        "aws"
        | "az"
        | "doctl"
        | "gcloud"
        | "gh"
        | "sfdx"
        | "bun run"
        | "bun x"
        | "cargo add"
        | "cargo run"
        | "consul kv"
        | "deno task"
        | "docker builder"
        | "docker compose"
        | "docker container"
        | "docker image"
        | "docker network"
        | "docker volume"
        | "eksctl create"
        | "git config"
        | "git remote"
        | "git stash"
        | "ip addr"
        | "ip link"
        | "ip netns"
        | "ip route"
        | "kind create"
        | "kubectl kustomize"
        | "kubectl rollout"
        | "mc admin"
        | "npm exec"
        | "npm init"
        | "npm run"
        | "npm view"
        | "openssl req"
        | "openssl x509"
        | "pnpm dlx"
        | "pnpm exec"
        | "pnpm run"
        | "podman container"
        | "podman image"
        | "pulumi stack"
        | "terraform workspace"
        | "vault auth"
        | "vault kv"
        | "yarn dlx"
        | "yarn run" => 3,
        _ => return None,
    })
}

/// Programs whose `always` is the literal command: they destroy data or run
/// arbitrary code, so no prefix of them is a safe grant. Every wrapper of the
/// read-only table (a program that runs its arguments) and every interpreter
/// is among them, so a new wrapper cannot be forgotten here; `make` is the one
/// exception, widened like `npm run` by OpenCode's arity table.
pub(crate) fn never_widen(name: &str) -> bool {
    let destructive = matches!(
        name,
        "rm" | "rmdir"
            | "dd"
            | "shred"
            | "truncate"
            | "chmod"
            | "chown"
            | "chgrp"
            | "kill"
            | "killall"
            | "pkill"
            | "crontab"
            | "at"
            | "batch"
            | "script"
            | "expect"
            | "osascript"
            | "systemd-run"
            | "runuser"
            | "pkexec"
            | "mkfs"
    ) || name.starts_with("mkfs");
    destructive
        || (crate::programs::is_wrapper(name) && name != "make")
        || crate::programs::is_interpreter(name)
}

/// Global flags that take a value, per program, so they are skipped with it.
fn flag_takes_value(prog: &str, flag: &str) -> bool {
    if flag.contains('=') {
        return false;
    }
    match prog {
        "git" => matches!(
            flag,
            "-C" | "-c"
                | "--git-dir"
                | "--work-tree"
                | "--namespace"
                | "--config-env"
                | "--super-prefix"
        ),
        "docker" | "podman" => matches!(
            flag,
            "-H" | "--host" | "-c" | "--context" | "--config" | "-l" | "--log-level"
        ),
        "kubectl" | "helm" => matches!(
            flag,
            "-n" | "--namespace"
                | "--context"
                | "--kube-context"
                | "--cluster"
                | "--kubeconfig"
                | "-s"
                | "--server"
                | "--user"
                | "--as"
        ),
        "npm" | "pnpm" | "yarn" | "bun" => matches!(
            flag,
            "--prefix" | "-C" | "--cwd" | "--filter" | "-F" | "-w" | "--workspace"
        ),
        "cargo" => matches!(
            flag,
            "-C" | "--config" | "-Z" | "--manifest-path" | "-p" | "--package"
        ),
        "make" => matches!(
            flag,
            "-C" | "-f" | "--file" | "--directory" | "-I" | "--include-dir"
        ),
        "go" => flag == "-C",
        "aws" => matches!(
            flag,
            "--profile" | "--region" | "--output" | "--endpoint-url"
        ),
        "gcloud" => matches!(flag, "--project" | "--account" | "--configuration"),
        "gh" => matches!(flag, "-R" | "--repo"),
        "systemctl" => matches!(flag, "-H" | "--host" | "-M" | "--machine"),
        "terraform" | "tmux" => matches!(flag, "-S" | "-L" | "-f"),
        _ => false,
    }
}

/// The `always` pattern of one simple command.
pub(crate) fn always(item: &Item, text: &str) -> String {
    let literal = || text.to_string();
    let clean = item.assigns.is_empty()
        && !item.opaque
        && item.construct.is_none()
        && item.redirects.iter().all(|r| r.refusal.is_none());
    let Some((first, args)) = item.words.split_first() else {
        return literal();
    };
    if !clean || !first.is_plain() {
        return literal();
    }
    let base = first.text.rsplit('/').next().unwrap_or(&first.text);
    if never_widen(base) {
        return literal();
    }
    let mut tokens: Vec<&str> = vec![first.text.as_str()];
    let mut keys: Vec<&str> = vec![base];
    let mut i = 0;
    while tokens.len() < 3 {
        let Some(w) = args.get(i) else { break };
        i += 1;
        if !w.is_plain() {
            break;
        }
        let a = w.text.as_str();
        if a.starts_with('-') && a.len() > 1 {
            if flag_takes_value(base, a) {
                i += 1;
            }
            continue;
        }
        tokens.push(a);
        keys.push(a);
    }
    let mut n = 1;
    for len in 1..=keys.len() {
        if let Some(a) = arity(&keys[..len].join(" ")) {
            n = a;
        }
    }
    if tokens.len() < n {
        return literal();
    }
    let prefix = &tokens[..n];
    if prefix
        .iter()
        .any(|t| t.is_empty() || t.contains(['*', '?', '[', ' ', '\t', '\n']))
    {
        return literal();
    }
    format!("{} *", prefix.join(" "))
}
