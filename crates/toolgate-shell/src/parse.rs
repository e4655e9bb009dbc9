//! The tree-sitter-bash front end: walk the syntax tree and produce simple
//! commands ([`Item`]s), recording every construct that cannot be proven
//! read-only on the commands it affects.
//!
//! Commands found inside substitutions, subshells, loops or function bodies
//! are still produced (so rules can match them); they carry the refusal of
//! the construct around them.

use std::borrow::Cow;
use std::cell::{Cell, RefCell};

use tree_sitter::{Node, Parser, Tree};

use crate::decode::WordBuilder;
use crate::syntax::{bash_only, Assign, Item, Redir, Word};
use crate::Refusal;

/// Syntactic nesting deeper than this is refused rather than walked.
pub(crate) const MAX_NEST: usize = 100;

/// A `for` loop over more plain words than this is judged with its
/// variable unknown (the body is walked once per plain word otherwise).
const MAX_LITERALS: usize = 16;

/// Loop bodies walked in one script at most (see `Walker::loop_walks`).
const MAX_LOOP_WALKS: usize = 64;

/// Characters that make a value split or glob when used unquoted (or that
/// quoting would make a different word).
const SPLITS: &[char] = &[
    ' ', '\t', '\n', '*', '?', '[', ']', '{', '}', '\'', '"', '\\', '$', '`', '~',
];

thread_local! {
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

fn new_parser() -> Option<Parser> {
    let mut parser = Parser::new();
    parser
        .set_language(&tree_sitter_bash::LANGUAGE.into())
        .ok()?;
    Some(parser)
}

fn parse_tree(src: &str) -> Option<Tree> {
    PARSER.with(|cell| match cell.try_borrow_mut() {
        Ok(mut slot) => {
            if slot.is_none() {
                *slot = new_parser();
            }
            slot.as_mut()?.parse(src, None)
        }
        Err(_) => new_parser()?.parse(src, None),
    })
}

/// The script as tree-sitter gets it: every non-ASCII character replaced by
/// as many `a`s as it has bytes. Bash's token structure depends only on
/// ASCII characters (non-ASCII bytes are ordinary word characters), so the
/// tree is the same, byte offsets are unchanged, and all text is then read
/// from the original. This also keeps non-ASCII input away from the
/// grammar's external scanner, which passes it to `isdigit()` and similar
/// C functions (undefined behaviour, seen to crash).
fn masked(src: &str) -> Cow<'_, str> {
    if src.is_ascii() {
        return Cow::Borrowed(src);
    }
    let mut out = String::with_capacity(src.len());
    for c in src.chars() {
        if c.is_ascii() {
            out.push(c);
        } else {
            out.extend(std::iter::repeat_n('a', c.len_utf8()));
        }
    }
    Cow::Owned(out)
}

/// Parse a script into simple commands, or say why it cannot be parsed.
pub(crate) fn parse(src: &str) -> Result<Vec<Item>, Refusal> {
    let Some(tree) = parse_tree(&masked(src)) else {
        return Err(Refusal::new("the bash parser could not read the script"));
    };
    let root = tree.root_node();
    if root.has_error() {
        return Err(Refusal::new(
            "the script does not parse as bash (syntax error or unterminated quote)",
        ));
    }
    if !covered(root, src) {
        return Err(Refusal::new(
            "the bash parser skipped part of the script, so it cannot be proven read-only",
        ));
    }
    let mut walker = Walker {
        src,
        items: Vec::new(),
        fatal: None,
        misaligned: Cell::new(false),
        bindings: Vec::new(),
        pipe_in: None,
        loop_walks: 0,
    };
    walker.seq(root, None, 0);
    if walker.misaligned.get() {
        return Err(Refusal::new(
            "the bash parser split a non-ASCII character, so the script cannot be proven read-only",
        ));
    }
    match walker.fatal {
        Some(r) => Err(r),
        None => Ok(walker.items),
    }
}

/// Only blanks, newlines and line continuations may lie outside the tokens.
fn blank(gap: &str) -> bool {
    gap.replace("\\\n", "")
        .chars()
        .all(|c| matches!(c, ' ' | '\t' | '\n'))
}

/// Cross-check the tree against the text: every byte that is not blank must
/// belong to some token (tree-sitter-bash can silently drop text, e.g. a
/// substitution in a here-document body). Here-document bodies count as one
/// token; they are checked against the text separately.
fn covered(root: Node<'_>, src: &str) -> bool {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    let mut cursor = root.walk();
    'outer: loop {
        let node = cursor.node();
        let leaf = node.child_count() == 0 || node.kind() == "heredoc_body";
        if !leaf && cursor.goto_first_child() {
            continue;
        }
        if leaf {
            // An anonymous token is literal text: its source must be exactly
            // that text (tree-sitter-bash can make a `"` token swallow a blank,
            // merging two words).
            if !node.is_named() && src.get(node.byte_range()) != Some(node.kind()) {
                return false;
            }
            ranges.push((node.start_byte(), node.end_byte()));
        }
        loop {
            if cursor.goto_next_sibling() {
                continue 'outer;
            }
            if !cursor.goto_parent() {
                break 'outer;
            }
        }
    }
    ranges.sort_unstable();
    let mut pos = 0;
    for (start, end) in ranges {
        if start > pos && !blank(src.get(pos..start).unwrap_or("x")) {
            return false;
        }
        pos = pos.max(end);
    }
    pos >= src.len() || blank(src.get(pos..).unwrap_or("x"))
}

/// Node kinds that are statements (produce commands).
fn is_statement(kind: &str) -> bool {
    matches!(
        kind,
        "command"
            | "redirected_statement"
            | "list"
            | "pipeline"
            | "subshell"
            | "compound_statement"
            | "function_definition"
            | "if_statement"
            | "while_statement"
            | "for_statement"
            | "c_style_for_statement"
            | "case_statement"
            | "negated_command"
            | "test_command"
            | "declaration_command"
            | "unset_command"
            | "variable_assignment"
            | "variable_assignments"
    )
}

fn is_redirect(kind: &str) -> bool {
    matches!(
        kind,
        "file_redirect" | "heredoc_redirect" | "herestring_redirect"
    )
}

fn set_own(own: &mut Option<Refusal>, reason: impl Into<String>) {
    if own.is_none() {
        *own = Some(Refusal::new(reason));
    }
}

fn inherit(own: Option<Refusal>, inh: Option<&Refusal>) -> Option<Refusal> {
    own.or_else(|| inh.cloned())
}

/// Children of a node with their field names.
fn children_with_fields(node: Node<'_>) -> Vec<(Option<&'static str>, Node<'_>)> {
    let mut out = Vec::with_capacity(node.child_count());
    let mut cursor = node.walk();
    if cursor.goto_first_child() {
        loop {
            out.push((cursor.field_name(), cursor.node()));
            if !cursor.goto_next_sibling() {
                break;
            }
        }
    }
    out
}

fn children(node: Node<'_>) -> Vec<Node<'_>> {
    let mut cursor = node.walk();
    node.children(&mut cursor).collect()
}

/// True when the children of `node` cover its source exactly, with no gap
/// that the walker would not see.
fn contiguous(node: Node<'_>) -> bool {
    let mut pos = node.start_byte();
    for child in children(node) {
        if child.start_byte() != pos {
            return false;
        }
        pos = child.end_byte();
    }
    pos == node.end_byte()
}

struct Walker<'s> {
    src: &'s str,
    items: Vec<Item>,
    /// The tree cannot be trusted (the whole script is refused).
    fatal: Option<Refusal>,
    /// A token boundary fell inside a (masked) non-ASCII character.
    misaligned: Cell<bool>,
    /// Loop variables of the loops being walked, innermost last.
    bindings: Vec<(String, Binding)>,
    /// While walking a statement that reads a pipe: the names bound of what
    /// the command before it prints.
    pipe_in: Option<Vec<String>>,
    /// Loop bodies walked so far: past [`MAX_LOOP_WALKS`], a loop's body is
    /// walked once with its variable unknown (nested loops multiply).
    loop_walks: usize,
}

/// What a loop variable holds while its body is walked.
#[derive(Debug, Clone)]
enum Binding {
    /// One word without blanks, quotes or glob characters (the body is
    /// walked once for each).
    Literal(String),
    /// A name matching one of these globs (a bounded command's output).
    Names(Vec<String>),
    /// One match of this glob (the body is walked once for each glob).
    Glob(String),
    /// Anything.
    Unknown,
}

/// A loop or `read` variable toolgate lets a read-only script set: lower
/// case (the environment's variables that programs read are upper case),
/// and none of the lower-case ones programs do read (`http_proxy`, ...).
pub(crate) fn harmless_variable(name: &str) -> bool {
    let mut bytes = name.bytes();
    bytes
        .next()
        .is_some_and(|c| c.is_ascii_lowercase() || c == b'_')
        && name
            .bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'_')
        && !name.contains("proxy")
        && name != "_"
}

impl<'s> Walker<'s> {
    fn raw(&self, node: Node<'_>) -> &'s str {
        match self.src.get(node.byte_range()) {
            Some(text) => text,
            None => {
                self.misaligned.set(true);
                ""
            }
        }
    }

    /// Give up on a subtree that is nested too deeply, failing closed.
    fn too_deep(&mut self, node: Node<'_>) {
        let raw = self.raw(node);
        let shown: String = raw.chars().take(80).collect();
        self.items.push(Item {
            words: vec![Word::literal(shown.trim())],
            construct: Some(Refusal::new(format!(
                "shell syntax nested more than {MAX_NEST} levels deep cannot be analysed"
            ))),
            opaque: true,
            ..Item::default()
        });
    }

    /// Mark every command from `start` on with a refusal (when it has none yet).
    fn mark(&mut self, start: usize, refusal: &Refusal) {
        for item in self.items.iter_mut().skip(start) {
            if item.construct.is_none() {
                item.construct = Some(refusal.clone());
            }
        }
    }

    /// A sequence of statements joined by operators: a program, list,
    /// pipeline, substitution body or group. Nested lists and pipelines are
    /// flattened without recursion (they nest one level per operator).
    fn seq(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        if depth > MAX_NEST {
            return self.too_deep(node);
        }
        let mut stack: Vec<Node<'_>> = children(node);
        stack.reverse();
        let mut prev_start = self.items.len();
        // The statement after a `|&` (marked once it is walked).
        let mut after_pipe_amp = false;
        // The statement after a `|`.
        let mut after_pipe = false;
        while let Some(n) = stack.pop() {
            let kind = n.kind();
            if n.is_named() && matches!(kind, "list" | "pipeline") {
                let mut kids = children(n);
                kids.reverse();
                stack.extend(kids);
                continue;
            }
            if n.is_named() {
                if kind == "comment" {
                    continue;
                }
                let producer = prev_start;
                prev_start = self.items.len();
                let piped = std::mem::take(&mut after_pipe);
                let names = if piped {
                    self.items.get(producer).and_then(crate::names::bound)
                } else {
                    None
                };
                let outer = std::mem::replace(&mut self.pipe_in, names.clone());
                self.stmt(n, inh, depth + 1);
                self.pipe_in = outer;
                if piped {
                    if let Some(first) = self.items.get_mut(prev_start) {
                        first.piped = true;
                        first.stdin_names = names;
                    }
                }
                if std::mem::take(&mut after_pipe_amp) {
                    // dash: a syntax error; bash: `2>&1 |`.
                    let r = bash_only("the pipe `|&`");
                    for item in self.items.iter_mut().skip(prev_start) {
                        item.bash_only.get_or_insert_with(|| r.clone());
                    }
                }
            } else if kind == "&" {
                self.mark(
                    prev_start,
                    &Refusal::new("background `&` cannot be proven read-only"),
                );
            } else if kind == "|&" {
                after_pipe_amp = true;
            } else if kind == "|" {
                after_pipe = true;
            }
            // Other anonymous tokens are operators (`&&`, `||`, `;`, `|`,
            // `|&`, newlines) or the brackets of the construct.
        }
    }

    fn stmt(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        if depth > MAX_NEST {
            return self.too_deep(node);
        }
        let kind = node.kind();
        match kind {
            "command" => {
                let idx = self.items.len();
                self.command(node, Vec::new(), None, idx, inh, depth);
            }
            "redirected_statement" => self.redirected(node, inh, depth),
            "list" | "pipeline" | "program" | "negated_command" => self.seq(node, inh, depth),
            "test_command" => self.test_command(node, inh, depth),
            "declaration_command" | "unset_command" => self.declaration(node, inh, depth),
            "variable_assignment" => {
                let idx = self.items.len();
                let mut own = None;
                let assign = self.assign(node, &mut own, inh, depth);
                let item = Item {
                    assigns: vec![assign],
                    construct: inherit(own, inh),
                    ..Item::default()
                };
                self.items.insert(idx, item);
            }
            "variable_assignments" => {
                for child in children(node) {
                    if child.is_named() {
                        self.stmt(child, inh, depth + 1);
                    }
                }
            }
            "comment" => {}
            // A subshell runs its commands in a copy of the shell: each is
            // judged as it stands. A `cd` inside is taken to persist, which
            // only adds directories to those later words are judged in.
            "subshell" => self.seq(node, inh, depth),
            "compound_statement" => {
                let arithmetic = children(node).first().is_some_and(|c| c.kind() == "((");
                if arithmetic {
                    self.construct(
                        node,
                        "arithmetic command `(( … ))` cannot be proven read-only",
                        inh,
                        depth,
                    );
                } else {
                    // A group runs its commands in this shell, each judged
                    // as it stands.
                    self.seq(node, inh, depth);
                }
            }
            "function_definition" => self.construct(
                node,
                "function definition cannot be proven read-only",
                inh,
                depth,
            ),
            // Conditions and branches are commands judged as they stand;
            // which of them run does not matter when each only reads.
            "if_statement" => self.generic(node, inh, depth),
            "while_statement" => self.while_loop(node, inh, depth),
            "for_statement" => self.for_loop(node, inh, depth),
            "c_style_for_statement" => self.construct(
                node,
                "arithmetic `for ((…))` loop cannot be proven read-only",
                inh,
                depth,
            ),
            "case_statement" => self.construct(
                node,
                "`case` statement cannot be proven read-only",
                inh,
                depth,
            ),
            other => {
                let reason = format!("shell construct `{other}` cannot be proven read-only");
                self.construct(node, &reason, inh, depth)
            }
        }
    }

    /// `for NAME [in WORDS]; do BODY; done`: the body's commands are judged
    /// with `$NAME` standing for each word: a plain word is put in its
    /// place (the body is walked once for each), a glob or a bounded
    /// substitution makes `"$NAME"` one of the names it can give.
    fn for_loop(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        let start = self.items.len();
        let mut own: Option<Refusal> = None;
        let mut name = String::new();
        let mut values: Vec<Word> = Vec::new();
        let mut listed = false;
        let mut body = None;
        for (field, child) in children_with_fields(node) {
            match field {
                Some("variable") => name = self.raw(child).to_string(),
                Some("value") => {
                    listed = true;
                    let w = self.word(child, &mut own, inh, depth);
                    values.push(w);
                }
                Some("body") => body = Some(child),
                _ if !child.is_named() => {
                    let raw = self.raw(child);
                    if raw == "select" {
                        set_own(&mut own, "`select` reads a choice from the terminal");
                    }
                    listed |= raw == "in";
                }
                _ => {
                    set_own(
                        &mut own,
                        format!(
                            "`{}` in a `for` loop cannot be proven read-only",
                            child.kind()
                        ),
                    );
                    self.generic(child, inh, depth + 1);
                }
            }
        }
        if !harmless_variable(&name) {
            set_own(
                &mut own,
                format!(
                    "the loop variable `{name}` could be one the environment gives programs (only lower-case names are allowed)"
                ),
            );
        }
        let refusal = own.or_else(|| inh.cloned());
        let inh = refusal.as_ref();
        let Some(body) = body else {
            self.mark(start, &Refusal::new("a `for` loop without a body"));
            return;
        };
        let mut literals: Vec<String> = Vec::new();
        let mut globs: Vec<String> = Vec::new();
        let mut names: Vec<String> = Vec::new();
        let mut unknown = !listed;
        for v in &values {
            let text = v.text.as_str();
            if v.is_plain() && !text.is_empty() && !text.contains(SPLITS) {
                literals.push(text.to_string());
            } else if let (Some(bound), None) = (&v.names, &v.bash_only) {
                names.extend(bound.iter().cloned());
            } else if v.expansion.is_none()
                && !v.tilde
                && matches!(v.glob, Some('*' | '?' | '['))
                && v.bash_only.is_none()
                && !text.contains(['{', '}', ' ', '\t', '\n', '\'', '"', '\\'])
            {
                globs.push(text.to_string());
            } else {
                unknown = true;
            }
        }
        if literals.len() + globs.len() > MAX_LITERALS
            || self.loop_walks + literals.len() + globs.len() + 1 > MAX_LOOP_WALKS
        {
            unknown = true;
        }
        let mut walks: Vec<Binding> = Vec::new();
        if unknown {
            walks.push(Binding::Unknown);
        } else {
            walks.extend(literals.into_iter().map(Binding::Literal));
            walks.extend(globs.into_iter().map(Binding::Glob));
            if !names.is_empty() {
                walks.push(Binding::Names(names));
            }
            if walks.is_empty() {
                // `for x in; do …`: never runs; judged once all the same.
                walks.push(Binding::Unknown);
            }
        }
        self.loop_walks += walks.len();
        for binding in walks {
            self.bindings.push((name.clone(), binding));
            self.seq(body, inh, depth + 1);
            self.bindings.pop();
        }
        if let Some(r) = refusal {
            self.mark(start, &r);
        }
    }

    /// `while COND; do BODY; done` (and `until`): the condition and body are
    /// commands judged as they stand. `… | while read -r NAME` binds NAME to
    /// the names the producer can print.
    fn while_loop(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        let start = self.items.len();
        let mut body = None;
        let pipe_in = self.pipe_in.take();
        for (field, child) in children_with_fields(node) {
            if field == Some("body") {
                body = Some(child);
            } else if child.is_named() {
                if field == Some("condition") || is_statement(child.kind()) {
                    self.stmt(child, inh, depth + 1);
                } else {
                    self.generic(child, inh, depth + 1);
                }
            }
        }
        let Some(body) = body else {
            self.mark(start, &Refusal::new("a `while` loop without a body"));
            return;
        };
        // The condition's `read` names, when it is exactly `read [-r] NAME...`.
        let mut bound: Vec<(String, Binding)> = Vec::new();
        let read_names: Option<Vec<&Word>> = match self.items.get(start..) {
            Some([cond])
                if cond
                    .words
                    .first()
                    .is_some_and(|w| w.is_plain() && w.text == "read") =>
            {
                Some(
                    cond.words[1..]
                        .iter()
                        .filter(|w| !w.text.starts_with('-'))
                        .collect(),
                )
            }
            _ => None,
        };
        if let Some(read_names) = read_names {
            // Without `-r` a backslash is dropped: a name with one is
            // among those the policy checks for (as for blanks).
            let options_plain = self.items.get(start).is_some_and(|c| {
                c.words[1..]
                    .iter()
                    .filter(|w| w.text.starts_with('-'))
                    .all(|w| w.text == "-r")
            });
            for (k, w) in read_names.iter().enumerate() {
                let binding = match (&pipe_in, read_names.len(), k) {
                    (Some(names), 1, 0) if options_plain => Binding::Names(names.clone()),
                    _ => Binding::Unknown,
                };
                bound.push((w.text.clone(), binding));
            }
        }
        let pushed = bound.len();
        self.bindings.extend(bound);
        self.seq(body, inh, depth + 1);
        self.bindings.truncate(self.bindings.len() - pushed);
        self.pipe_in = pipe_in;
    }

    /// A construct that is never read-only: the commands inside are still
    /// collected, each refused with the construct's reason.
    fn construct(&mut self, node: Node<'_>, reason: &str, inh: Option<&Refusal>, depth: usize) {
        let refusal = inh.cloned().unwrap_or_else(|| Refusal::new(reason));
        let start = self.items.len();
        self.generic(node, Some(&refusal), depth + 1);
        if self.items.len() == start {
            // Nothing inside (e.g. `(( x++ ))`): still one refused entry.
            let raw = self.raw(node);
            self.items.push(Item {
                words: vec![Word::literal(raw.trim())],
                construct: Some(refusal),
                opaque: true,
                ..Item::default()
            });
        }
    }

    /// Find statements and substitutions anywhere below `node`.
    fn generic(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        if depth > MAX_NEST {
            return self.too_deep(node);
        }
        for child in children(node) {
            if !child.is_named() {
                continue;
            }
            let kind = child.kind();
            if is_statement(kind) {
                self.stmt(child, inh, depth + 1);
            } else if matches!(kind, "command_substitution" | "process_substitution") {
                self.seq(child, inh, depth + 1);
            } else {
                self.generic(child, inh, depth + 1);
            }
        }
    }

    fn redirected(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        let idx = self.items.len();
        let mut redirs = Vec::new();
        let mut own = None;
        let mut body = None;
        for (field, child) in children_with_fields(node) {
            if field == Some("body") {
                body = Some(child);
            } else if is_redirect(child.kind()) {
                self.redirect(child, &mut redirs, &mut own, inh, depth);
            } else if child.is_named() {
                set_own(
                    &mut own,
                    format!(
                        "`{}` in a redirection cannot be proven read-only",
                        child.kind()
                    ),
                );
            }
        }
        let piped_in = redirs.iter().find_map(|r| r.pipe.clone());
        match body {
            Some(b) if b.kind() == "command" => self.command(b, redirs, own, idx, inh, depth + 1),
            Some(b) => {
                let start = self.items.len();
                let outer = match &piped_in {
                    Some(names) => std::mem::replace(&mut self.pipe_in, names.clone()),
                    None => self.pipe_in.clone(),
                };
                self.stmt(b, inh, depth + 1);
                self.pipe_in = outer;
                // tree-sitter-bash may attach a redirection to a whole
                // pipeline; apply it to every command in the body.
                if let Some(r) = redirs.iter().find_map(|r| r.refusal.clone()).or(own) {
                    self.mark(start.min(idx), &r);
                }
                let last = self.items.get_mut(start..).and_then(<[Item]>::last_mut);
                match last {
                    // Bash gives it to the last command (`cd /dev && cat
                    // <tcp/h/p` reads `/dev/tcp/h/p`): judge it there.
                    Some(last) if matches!(b.kind(), "list" | "pipeline") => {
                        last.redirects.extend(redirs)
                    }
                    _ => {
                        let unknown = redirs.iter().find_map(|r| {
                            r.bash_only.clone().or_else(|| {
                                r.input.as_ref().map(|p| {
                                    Refusal::new(format!(
                                        "input redirection `< {p}` of a compound command cannot be proven read-only"
                                    ))
                                })
                            })
                        });
                        if let Some(r) = unknown {
                            self.mark(start.min(idx), &r);
                        }
                    }
                }
            }
            None => {
                let item = Item {
                    redirects: redirs,
                    ..Item::default()
                };
                self.place(idx, item, own, inh);
            }
        }
    }

    fn command(
        &mut self,
        node: Node<'_>,
        extra: Vec<Redir>,
        own: Option<Refusal>,
        idx: usize,
        inh: Option<&Refusal>,
        depth: usize,
    ) {
        let mut own = own;
        let mut item = Item::default();
        // Words of one simple command are separated by blanks only: a bare
        // newline between them means the tree merged two commands.
        let kids = children(node);
        for pair in kids.windows(2) {
            let gap = self
                .src
                .get(pair[0].end_byte()..pair[1].start_byte())
                .unwrap_or("x");
            if !gap
                .replace("\\\n", "")
                .chars()
                .all(|c| c == ' ' || c == '\t')
            {
                self.fatal = Some(Refusal::new(
                    "the bash parser joined separate lines into one command, so the script cannot be proven read-only",
                ));
            }
        }
        for (field, child) in children_with_fields(node) {
            let kind = child.kind();
            if kind == "variable_assignment" {
                let a = self.assign(child, &mut own, inh, depth);
                item.assigns.push(a);
            } else if field == Some("name") || kind == "command_name" {
                let named: Vec<Node<'_>> = children(child)
                    .into_iter()
                    .filter(|c| c.is_named())
                    .collect();
                if named.len() == 1 && contiguous(child) {
                    let w = self.word(named[0], &mut own, inh, depth);
                    item.words.push(w);
                } else {
                    set_own(&mut own, "a program name that cannot be decoded");
                    item.words.push(Word {
                        text: self.raw(child).to_string(),
                        expansion: Some(self.raw(child).to_string()),
                        ..Word::default()
                    });
                    self.generic(child, inh, depth + 1);
                }
            } else if is_redirect(kind) {
                self.redirect(child, &mut item.redirects, &mut own, inh, depth);
            } else if child.is_named() {
                if kind == "comment" {
                    continue;
                }
                let w = self.word(child, &mut own, inh, depth);
                item.words.push(w);
            } else {
                set_own(
                    &mut own,
                    format!(
                        "token `{}` in a command cannot be proven read-only",
                        self.raw(child)
                    ),
                );
            }
        }
        item.redirects.extend(extra);
        if let Some(names) = item.redirects.iter().find_map(|r| r.pipe.clone()) {
            item.piped = true;
            item.stdin_names = names;
        }
        self.place(idx, item, own, inh);
    }

    fn assign(
        &mut self,
        node: Node<'_>,
        own: &mut Option<Refusal>,
        inh: Option<&Refusal>,
        depth: usize,
    ) -> Assign {
        let mut name = String::new();
        let mut value = Word::default();
        let mut append = false;
        for (field, child) in children_with_fields(node) {
            match field {
                Some("name") => {
                    name = self.raw(child).to_string();
                    if child.kind() != "variable_name" {
                        set_own(
                            own,
                            format!("assignment to `{name}` cannot be proven read-only"),
                        );
                        self.generic(child, inh, depth + 1);
                    }
                }
                Some("value") => {
                    if child.kind() == "array" {
                        set_own(own, "array assignment cannot be proven read-only");
                        self.generic(child, inh, depth + 1);
                        value = Word::literal(self.raw(child));
                    } else {
                        value = self.word(child, own, inh, depth);
                    }
                }
                _ => {
                    let raw = self.raw(child);
                    append |= !child.is_named() && raw == "+=";
                    if child.is_named() || !matches!(raw, "=" | "+=") {
                        set_own(
                            own,
                            format!("assignment `{}` cannot be proven read-only", self.raw(node)),
                        );
                    }
                }
            }
        }
        if append {
            // dash runs `NAME+=value` as a program.
            value
                .bash_only
                .get_or_insert_with(|| "the append assignment `+=`".to_string());
        }
        Assign { name, value }
    }

    fn redirect(
        &mut self,
        node: Node<'_>,
        out: &mut Vec<Redir>,
        own: &mut Option<Refusal>,
        inh: Option<&Refusal>,
        depth: usize,
    ) {
        // `{NAME}>file`, `{NAME}<&0`, `{NAME}>&-`: bash stores the descriptor
        // in the variable NAME of the current shell.
        let before = self
            .src
            .get(..node.start_byte())
            .and_then(|s| s.chars().next_back());
        let named_from = (before == Some('}')).then_some(out.len());
        match node.kind() {
            "file_redirect" => {
                let mut fd = "";
                let mut op: Option<&str> = None;
                let mut dests = Vec::new();
                for (field, child) in children_with_fields(node) {
                    if field == Some("descriptor") {
                        fd = self.raw(child);
                    } else if !child.is_named() {
                        if op.is_some() {
                            set_own(
                                own,
                                format!("redirection `{}` cannot be decoded", self.raw(node)),
                            );
                        }
                        op = Some(self.raw(child));
                    } else {
                        dests.push(self.word(child, own, inh, depth));
                    }
                }
                out.push(judge_redirect(fd, op.unwrap_or(""), &dests));
            }
            "heredoc_redirect" => {
                let mut text = String::new();
                let mut dash = false;
                let mut start: Option<Node<'_>> = None;
                let mut end: Option<Node<'_>> = None;
                for child in children(node) {
                    let kind = child.kind();
                    if !child.is_named() {
                        dash |= self.raw(child) == "<<-";
                        text.push_str(self.raw(child));
                    } else if kind == "heredoc_start" {
                        text.push_str(self.raw(child));
                        start = Some(child);
                    } else if kind == "heredoc_end" {
                        end = Some(child);
                    } else if kind == "heredoc_body" {
                        self.heredoc_body(child, own, inh, depth);
                    } else if is_redirect(kind) {
                        self.redirect(child, out, own, inh, depth);
                    } else {
                        set_own(
                            own,
                            format!("`{kind}` in a here-document cannot be proven read-only"),
                        );
                        self.generic(child, inh, depth + 1);
                    }
                }
                if let Some(problem) = self.heredoc_problem(start, end, dash) {
                    set_own(own, problem);
                }
                out.push(Redir {
                    text,
                    ..Redir::default()
                });
            }
            "herestring_redirect" => {
                let mut words = Vec::new();
                for child in children(node) {
                    if child.kind() == "file_descriptor" {
                        set_own(
                            own,
                            format!(
                                "a here-string on descriptor {} cannot be proven read-only",
                                self.raw(child)
                            ),
                        );
                    } else if child.is_named() {
                        words.push(self.word(child, own, inh, depth));
                    }
                }
                let mut text = String::from("<<<");
                text.push_str(&crate::syntax::join(&words));
                out.push(Redir {
                    text,
                    bash_only: Some(bash_only("the here-string `<<<`")),
                    ..Redir::default()
                });
            }
            other => {
                set_own(
                    own,
                    format!("redirection `{other}` cannot be proven read-only"),
                );
                self.generic(node, inh, depth + 1);
            }
        }
        if let Some(from) = named_from {
            let r = Refusal::new(
                "a named descriptor `{NAME}` before a redirection assigns a shell variable",
            );
            set_own(own, r.reason.clone());
            for redir in out.iter_mut().skip(from) {
                redir.refusal = Some(r.clone());
            }
        }
    }

    /// A here-document body only feeds input; it matters only when it runs
    /// commands through substitutions.
    fn heredoc_body(
        &mut self,
        node: Node<'_>,
        own: &mut Option<Refusal>,
        inh: Option<&Refusal>,
        depth: usize,
    ) {
        for child in children(node) {
            match child.kind() {
                "heredoc_content" | "simple_expansion" => {}
                _ if !child.is_named() => {}
                _ => {
                    let mut scratch = WordBuilder::default();
                    self.part(child, &mut scratch, own, inh, depth + 1);
                }
            }
        }
    }

    /// Check a here-document against the source text rather than the tree
    /// (tree-sitter-bash can drop a substitution from a body): its body must
    /// end where bash ends it, and an unquoted body must not substitute.
    fn heredoc_problem(
        &self,
        start: Option<Node<'_>>,
        end: Option<Node<'_>>,
        dash: bool,
    ) -> Option<String> {
        let (Some(start), Some(end)) = (start, end) else {
            return Some("a here-document without its end cannot be proven read-only".to_string());
        };
        let raw_start = self.raw(start);
        if raw_start.contains('$') {
            return Some(
                "a here-document delimiter with `$` cannot be proven read-only".to_string(),
            );
        }
        let quoted = raw_start.contains(['\'', '"', '\\']);
        let delimiter: String = raw_start
            .chars()
            .filter(|c| !matches!(c, '\'' | '"' | '\\'))
            .collect();
        let region = self.src.get(start.end_byte()..end.start_byte())?;
        let strip = |line: &str| -> String {
            if dash {
                line.trim_start_matches('\t').to_string()
            } else {
                line.to_string()
            }
        };
        // The body starts on the line after the operator.
        let body = match region.find('\n') {
            Some(nl) => &region[nl + 1..],
            None => {
                return Some("a here-document on one line cannot be proven read-only".to_string())
            }
        };
        let mut lines: Vec<&str> = body.split('\n').collect();
        // The last piece is the start of the end line (tabs before the delimiter).
        let last = lines.pop().unwrap_or("");
        if lines.iter().any(|l| strip(l) == delimiter) || !strip(last).is_empty() {
            return Some(
                "a here-document whose end cannot be determined cannot be proven read-only"
                    .to_string(),
            );
        }
        let end_line_rest = self.src.get(end.start_byte()..).unwrap_or("");
        let end_line = end_line_rest.split('\n').next().unwrap_or("");
        if end_line != delimiter {
            return Some(
                "a here-document whose end cannot be determined cannot be proven read-only"
                    .to_string(),
            );
        }
        if !quoted && ["$(", "`", "${", "$["].iter().any(|p| body.contains(p)) {
            return Some(
                "a here-document with a substitution or expansion cannot be proven read-only"
                    .to_string(),
            );
        }
        None
    }

    /// Put a finished command at its source position `idx` (commands found
    /// inside it while walking were pushed first), with its own or inherited
    /// construct.
    fn place(&mut self, idx: usize, mut item: Item, own: Option<Refusal>, inh: Option<&Refusal>) {
        item.construct = inherit(own, inh);
        let at = idx.min(self.items.len());
        self.items.insert(at, item);
    }

    fn test_command(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        let idx = self.items.len();
        let mut own = None;
        let mut words = Vec::new();
        self.test_words(node, &mut words, &mut own, inh, depth);
        // `/bin/sh` runs `[[` as a program: its `<`, `>`, `&&`, `||`, `(`
        // and `)` become redirections, separators and subshells.
        let raw = self.raw(node);
        let bash_only = (raw.starts_with("[[")
            && raw.contains(['<', '>', '&', '|', '(', ')', ';', '\n']))
        .then(|| crate::syntax::bash_only("`[[ … ]]` with `<`, `>`, `&&`, `||` or parentheses"));
        let item = Item {
            words,
            bash_only,
            ..Item::default()
        };
        self.place(idx, item, own, inh);
    }

    fn test_words(
        &mut self,
        node: Node<'_>,
        words: &mut Vec<Word>,
        own: &mut Option<Refusal>,
        inh: Option<&Refusal>,
        depth: usize,
    ) {
        if depth > MAX_NEST {
            set_own(own, "test nested too deeply");
            return;
        }
        for child in children(node) {
            let kind = child.kind();
            if !child.is_named() {
                words.push(Word::literal(self.raw(child)));
                continue;
            }
            match kind {
                "unary_expression"
                | "binary_expression"
                | "parenthesized_expression"
                | "negated_expression"
                | "postfix_expression"
                | "ternary_expression" => self.test_words(child, words, own, inh, depth + 1),
                "test_operator" => words.push(Word::literal(self.raw(child))),
                "regex" | "extglob_pattern" => {
                    let raw = self.raw(child);
                    if raw.contains(['$', '`']) {
                        set_own(
                            own,
                            format!("pattern `{raw}` with an expansion cannot be proven read-only"),
                        );
                    }
                    words.push(Word::literal(raw));
                }
                _ => {
                    let w = self.word(child, own, inh, depth);
                    words.push(w);
                }
            }
        }
    }

    /// `export A=1`, `local x`, `unset y`: a command named by the keyword.
    fn declaration(&mut self, node: Node<'_>, inh: Option<&Refusal>, depth: usize) {
        let idx = self.items.len();
        let mut own = None;
        let mut words = Vec::new();
        for child in children(node) {
            let kind = child.kind();
            if !child.is_named() {
                words.push(Word::literal(self.raw(child)));
            } else if kind == "variable_assignment" {
                let a = self.assign(child, &mut own, inh, depth);
                words.push(Word::literal(&format!("{}={}", a.name, a.value.text)));
            } else if kind == "variable_name" {
                words.push(Word::literal(self.raw(child)));
            } else {
                let w = self.word(child, &mut own, inh, depth);
                words.push(w);
            }
        }
        let item = Item {
            words,
            ..Item::default()
        };
        self.place(idx, item, own, inh);
    }

    fn word(
        &mut self,
        node: Node<'_>,
        own: &mut Option<Refusal>,
        inh: Option<&Refusal>,
        depth: usize,
    ) -> Word {
        let mut b = WordBuilder::default();
        self.part(node, &mut b, own, inh, depth + 1);
        if let Some(u) = b.uncertain.take() {
            set_own(own, format!("{u} cannot be decoded with certainty"));
        }
        b.finish()
    }

    fn part(
        &mut self,
        node: Node<'_>,
        b: &mut WordBuilder,
        own: &mut Option<Refusal>,
        inh: Option<&Refusal>,
        depth: usize,
    ) {
        let raw = self.raw(node);
        if depth > MAX_NEST {
            set_own(own, "a word nested too deeply cannot be analysed");
            b.expansion(raw);
            return;
        }
        match node.kind() {
            "word" | "number" => b.unquoted_source(raw),
            "raw_string" => match raw.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')) {
                Some(body) => b.quoted_str(body),
                None => {
                    b.uncertain = Some(format!("string `{raw}`"));
                    b.expansion(raw);
                }
            },
            "string" => {
                if !contiguous(node) {
                    b.uncertain = Some(format!("string `{raw}`"));
                }
                let kids = children(node);
                let last = kids.len().saturating_sub(1);
                let outer_quotes = std::mem::replace(&mut b.in_quotes, true);
                for (i, child) in kids.into_iter().enumerate() {
                    if !child.is_named() {
                        // The quotes around the string, and a `$` that starts
                        // no expansion (`"a$"`, `"$'x'"`): bash keeps it.
                        match self.raw(child) {
                            "\"" if i == 0 || i == last => {}
                            "$" => b.quoted('$'),
                            other => b.uncertain = Some(format!("`{other}` in string `{raw}`")),
                        }
                        continue;
                    }
                    if child.kind() == "string_content" {
                        b.double_quoted_source(self.raw(child));
                    } else {
                        self.part(child, b, own, inh, depth + 1);
                    }
                }
                b.in_quotes = outer_quotes;
            }
            "concatenation" => {
                if !contiguous(node) {
                    b.uncertain = Some(format!("word `{raw}`"));
                }
                for child in children(node) {
                    self.part(child, b, own, inh, depth + 1);
                }
            }
            "ansi_c_string" => b.ansi_c_source(raw),
            "translated_string" => {
                b.uncertain = Some(format!("locale string `{raw}`"));
                b.expansion(raw);
            }
            "simple_expansion" => self.variable(raw.get(1..).unwrap_or(""), raw, b),
            "expansion" if plain_expansion(node) => self.variable(
                raw.get(2..raw.len().saturating_sub(1)).unwrap_or(""),
                raw,
                b,
            ),
            "expansion" => {
                if !plain_expansion(node) {
                    set_own(
                        own,
                        format!("parameter expansion `{raw}` cannot be proven read-only"),
                    );
                    self.generic(node, inh, depth + 1);
                }
                b.expansion(raw);
            }
            "command_substitution" => {
                // `$(…)`: its commands are judged as they stand; its output
                // becomes words, which may name any file unless the command
                // is a producer whose names are known (names.rs).
                if raw.starts_with('`') {
                    set_own(
                        own,
                        "backtick command substitution cannot be proven read-only",
                    );
                }
                let names = self.substitution(node, inh, depth);
                b.expansion(raw);
                b.names = names;
                b.names_split = !b.in_quotes;
                b.names_text = Some(raw.to_string());
            }
            "process_substitution" => {
                // `<(…)`: bash runs the commands, each judged as it stands,
                // and the word is a pipe to read (dash: a syntax error).
                // `>(…)` gives the program a pipe to write to.
                if raw.starts_with('>') {
                    set_own(
                        own,
                        "process substitution `>(...)` cannot be proven read-only",
                    );
                }
                let names = self.substitution(node, inh, depth);
                // dash reads `<(` as a syntax error: the line never runs.
                b.expansion(raw);
                b.pipe();
                b.names = names;
                b.names_text = Some(raw.to_string());
            }
            "arithmetic_expansion" => {
                set_own(
                    own,
                    "arithmetic expansion `$((...))` cannot be proven read-only",
                );
                self.generic(node, inh, depth + 1);
                b.expansion(raw);
            }
            other => {
                set_own(
                    own,
                    format!("`{other}` in a word cannot be proven read-only"),
                );
                self.generic(node, inh, depth + 1);
                b.expansion(raw);
            }
        }
    }
}

impl Walker<'_> {
    /// Walk the commands of `$(…)` or `<(…)` (they read the outer input,
    /// not a pipe the walker knows) and give the names bound of what they
    /// print, when they are one pipeline ending in a producer of names.
    fn substitution(
        &mut self,
        node: Node<'_>,
        inh: Option<&Refusal>,
        depth: usize,
    ) -> Option<Vec<String>> {
        let start = self.items.len();
        let outer = self.pipe_in.take();
        self.seq(node, inh, depth + 1);
        self.pipe_in = outer;
        let inner = self.items.get(start..).unwrap_or(&[]);
        if inner.iter().skip(1).all(|i| i.piped) {
            inner.last().and_then(crate::names::bound)
        } else {
            None
        }
    }

    /// `$NAME` or `${NAME}`: a loop variable's value when one is bound.
    fn variable(&self, name: &str, raw: &str, b: &mut WordBuilder) {
        match self.bindings.iter().rev().find(|(n, _)| n == name) {
            Some((_, Binding::Literal(text))) => b.quoted_str(text),
            Some((_, Binding::Names(globs))) => {
                b.expansion(raw);
                b.names = Some(globs.clone());
                b.names_split = !b.in_quotes;
                b.names_text = Some(raw.to_string());
            }
            // The glob in its place: the same files (one at a time), and
            // the policy checks the matches' paths for what would split.
            Some((_, Binding::Glob(glob))) => {
                for c in glob.chars() {
                    b.unquoted(c);
                }
                b.names = Some(vec![glob.clone()]);
                b.names_split = !b.in_quotes;
                b.names_text = Some(glob.clone());
            }
            Some((_, Binding::Unknown)) | None => {
                b.expansion(raw);
                b.names = None;
            }
        }
    }
}

/// A word that is exactly file names a producer printed (not commit ids).
fn file_names(w: &Word) -> bool {
    w.names
        .as_deref()
        .is_some_and(|n| n != [crate::names::HEX.to_string()])
}

/// `${NAME}` with nothing else inside.
fn plain_expansion(node: Node<'_>) -> bool {
    let kids = children(node);
    let named: Vec<&Node<'_>> = kids.iter().filter(|c| c.is_named()).collect();
    kids.len() == 3
        && named.len() == 1
        && matches!(named[0].kind(), "variable_name" | "special_variable_name")
}

/// Judge one file redirection: only the safe forms pass. An input
/// redirection from a plain path is returned with that path in `input`, to
/// be held against the project once the working directory is known.
pub(crate) fn judge_redirect(fd: &str, op: &str, dests: &[Word]) -> Redir {
    let dest = if dests.len() == 1 {
        dests.first()
    } else {
        None
    };
    let dtext = dest.map(|d| d.text.as_str()).unwrap_or("");
    let text = format!("{fd}{op}{dtext}");
    let shown = if dtext.is_empty() {
        format!("{fd}{op}")
    } else {
        format!("{fd}{op} {dtext}")
    };
    let devnull = dest.is_some_and(|d| d.is_plain() && d.text == "/dev/null");
    let digits = dest.is_some_and(|d| {
        d.is_plain() && !d.text.is_empty() && d.text.bytes().all(|c| c.is_ascii_digit())
    });
    let write = |op: &str| {
        if op.contains(">>") {
            Refusal::new(format!("output redirection `{shown}` appends to a file"))
        } else {
            Refusal::new(format!("output redirection `{shown}` writes a file"))
        }
    };
    let not_safe = || {
        Refusal::new(format!(
            "redirection `{shown}` is not one of the safe forms"
        ))
    };
    let mut input = None;
    // dash reads `>$'/dev/null'` as `>'$/dev/null'`.
    let mut sh_differs = dests
        .iter()
        .find_map(|d| d.bash_only.as_deref())
        .map(bash_only);
    let refusal = match op {
        // `12>x`: bash opens descriptor 12, /bin/sh passes `12` as an argument.
        _ if fd.len() > 1 => Some(Refusal::new(format!(
            "redirection `{shown}` on a descriptor above 9 cannot be proven read-only"
        ))),
        "<" if matches!(fd, "1" | "2") => Some(Refusal::new(format!(
            "input redirection `{shown}` points an output descriptor at a file"
        ))),
        // `< <(…)`: the input is a pipe from commands judged on their own.
        "<" if matches!(fd, "" | "0") && dest.is_some_and(|d| d.pipe) => None,
        // `< "$f"` with `$f` one of the names a producer printed: a read
        // of one of the files they match (reported with the command).
        "<" if matches!(fd, "" | "0") && dest.is_some_and(file_names) => None,
        "<" => match dest {
            Some(d) => match input_word_problem(d, &shown) {
                Some(r) => Some(r),
                None => {
                    if !devnull {
                        input = Some(d.text.clone());
                    }
                    None
                }
            },
            None => Some(not_safe()),
        },
        ">" | ">>" | ">|" => (!devnull).then(|| write(op)),
        "&>" | "&>>" => {
            // dash: `cmd &` in the background, then `>file`.
            sh_differs.get_or_insert_with(|| bash_only(&format!("the redirection `{op}`")));
            (!devnull).then(|| write(op))
        }
        ">&" if digits => {
            if matches!(fd, "" | "1" | "2") && matches!(dtext, "1" | "2") {
                None
            } else {
                Some(not_safe())
            }
        }
        ">&" if dest.is_some() => {
            sh_differs.get_or_insert_with(|| bash_only("the redirection `>&` to a file"));
            (!devnull).then(|| write(op))
        }
        // `1<&0` makes standard output a copy of standard input (a socket,
        // a device, ...); no duplication with `<&` is needed to read.
        "<&" => Some(Refusal::new(format!(
            "descriptor duplication `{shown}` can point output at an input"
        ))),
        "<>" => Some(Refusal::new(format!(
            "read-write redirection `{shown}` can create a file"
        ))),
        _ => Some(not_safe()),
    };
    let pipe = dest
        .filter(|d| d.pipe && op == "<" && matches!(fd, "" | "0"))
        .map(|d| d.names.clone());
    let input_names = dest
        .filter(|d| !d.pipe && op == "<" && matches!(fd, "" | "0") && file_names(d))
        .and_then(|d| d.names.clone());
    Redir {
        text,
        refusal,
        input,
        bash_only: sh_differs,
        pipe,
        input_names,
    }
}

/// What makes an input redirection's target other than a plain file path:
/// an expansion (`<$HOME/x`, `<${_}/tcp/…`), a tilde (`<~sys/tcp/…` is
/// `/dev/tcp/…` on Debian) or a glob.
fn input_word_problem(d: &Word, shown: &str) -> Option<Refusal> {
    let why = if d.expansion.is_some() {
        "uses an expansion"
    } else if d.tilde {
        "starts with `~` (a home directory)"
    } else if d.glob.is_some() {
        "uses a glob or brace"
    } else if d.text.is_empty() {
        "has an empty target"
    } else {
        return None;
    };
    Some(Refusal::new(format!(
        "input redirection `{shown}` {why}, so the file it reads cannot be known"
    )))
}
