#!/bin/sh
# Builds the hostile project of the execution oracle (crates/toolgate/tests/it/oracle.rs).
#
#   oracle_world.sh WORLD HOOKS MARKERS
#
# WORLD/proj is the project (a git repository with one commit and a dirty file),
# WORLD/neighbour a sibling that `../` writes would reach. Every planted program
# and every hook or configured command is a script that appends a line to
# MARKERS/NAME (outside WORLD) and prints `planted NAME ran`: a marker file
# means a planted program ran. The scripts in HOOKS are what the hostile
# configurations point at. Everything is rebuilt from scratch, deterministically.
set -eu
W=$1
H=$2
M=$3
P=$W/proj
rm -rf "$W" "$H"
mkdir -p "$P" "$H" "$M" "$W/neighbour"

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1
export GIT_AUTHOR_NAME=oracle GIT_AUTHOR_EMAIL=oracle@example.invalid
export GIT_COMMITTER_NAME=oracle GIT_COMMITTER_EMAIL=oracle@example.invalid
export GIT_AUTHOR_DATE='2020-01-01T00:00:00Z' GIT_COMMITTER_DATE='2020-01-01T00:00:00Z'
unset GIT_DIR GIT_WORK_TREE GIT_INDEX_FILE GIT_CEILING_DIRECTORIES 2>/dev/null || true

# marker PATH NAME: a program that records that it ran.
marker() {
    mkdir -p "$(dirname "$1")"
    printf '#!/bin/sh\necho "%s ran: $0 $*" >>"%s/%s"\necho "planted %s ran"\nexit 0\n' \
        "$2" "$M" "$2" "$2" >"$1"
    chmod 755 "$1"
}

for n in fsmonitor-evil diffext-evil pager-evil alias-evil hook-evil textconv-evil \
         fsmonitor-sub diffext-sub pager-sub textconv-sub \
         fsmonitor-hooked diffext-hooked \
         pager-home alias-home editor-home \
         fsmonitor-home0 diffext-home0 pager-home0 alias-home0 sshcmd-home0; do
    marker "$H/$n" "$n"
done

cd "$P"

# Ordinary files.
mkdir -p src docs crates/core/src tests tmp home
printf '# demo\n\nA project. TODO: more.\n[deps]\nx = 1\n[end]\n' >README.md
printf '[package]\nname = "demo"\nversion = "0.1.0"\n' >Cargo.toml
printf 'fn main() {\n    println!("hi"); // TODO\n}\n' >src/main.rs
printf 'pub fn lib() -> u32 {\n    1\n}\n' >src/lib.rs
printf 'pub struct Options;\n' >crates/core/src/lib.rs
printf '#[test]\nfn t() {}\n' >tests/t.rs
printf 'guide\n/api/v1\n/usr/lib\n' >docs/guide.md
printf 'line one\nline two\nerror: three\n' >log.txt
printf 'a\nb\nb\nc\n' >file.txt
printf 'alpha\n' >a.txt
printf 'beta\n' >b.txt
printf '{"name":"demo","list":[1,2,3]}\n' >data.json
printf 'README.md\nsrc/main.rs\n' >list.txt
printf 'SECRET_TOKEN=do-not-read\n' >.env
printf 'SECRET_TOKEN=example\n' >.env.example
printf 'production=1\n' >.env.production
mkdir -p secrets
printf 'private key\n' >secrets/key
printf 'token\n' >secrets/token
printf 'neighbour\n' >"$W/neighbour/file.txt"

# Committed links: one to a guarded file (reading `docs/cfg` reads `.env`), one out
# of the project. And lists of file names that name a guarded file, NUL-separated
# (`wc --files0-from=lists/guarded0` reads `.env`) and one a line.
ln -s ../.env docs/cfg
ln -s /etc docs/etc
mkdir -p lists
printf '.env\0' >lists/guarded0
printf '.env\n' >lists/guarded

# For commands whose words come from a producer (`find lib | xargs cat`,
# `for f in lib/*`): a source-looking link to `.env`, and a name that splits
# at its blank into `lib/split` and `.env`.
mkdir -p lib
printf 'pub fn a() {}\n' >lib/a.rs
ln -s ../.env lib/evil.rs
printf 'harmless\n' >'lib/split .env'

# Archives for tar, unzip and zipinfo: ordinary members, one named `../neighbour/escape`
# and one with an absolute name (extracting them would write outside the project).
mkdir -p archives
python3 - <<'PY'
import gzip, io, tarfile, zipfile
members = [
    ("README.md", b"# archived readme\n"),
    ("src/main.rs", b"fn main() {}\n"),
    ("../neighbour/escape", b"escaped\n"),
    ("/tmp/toolgate-oracle-absolute-escape", b"absolute\n"),
]
buf = io.BytesIO()
with tarfile.open(fileobj=buf, mode="w", format=tarfile.GNU_FORMAT) as t:
    for name, data in members:
        info = tarfile.TarInfo(name)
        info.size, info.mtime, info.mode = len(data), 1577836800, 0o644
        t.addfile(info, io.BytesIO(data))
open("archives/evil.tar", "wb").write(buf.getvalue())
with open("archives/evil.tar.gz", "wb") as f:
    with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as g:
        g.write(buf.getvalue())
with zipfile.ZipFile("archives/evil.zip", "w") as z:
    for name, data in members:
        z.writestr(zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0)), data)
    z.writestr(zipfile.ZipInfo("dir/", (2020, 1, 1, 0, 0, 0)), b"")
PY

# Files named like flags: a glob that reaches them hands them to a program as options.
for f in -rf --output=x -delete -i -e -o -f --files-from=list.txt -exec --pre=sh -n; do
    printf 'flag-named file\n' >./"$f"
done

# Planted programs: where PATH could point after an assignment (`0`, `10`, `11`, `12`:
# `printf %n PATH`, `{PATH}<file`), and in the project root (bash's default PATH, used
# after `env -i`, ends in `.`).
for d in 0 10 11 12; do
    for p in ls cat git rg tree head tail grep sed find sort env xargs bash sh dash date wc \
             echo printf stat du jq file uniq base64 sleep true test; do
        marker "$d/$p" "planted-$d-$p"
    done
done
for p in ls rg tree git cat grep head sed find sort env xargs wc file jq planted-only-here; do
    marker "./$p" "planted-root-$p"
done

# Git configuration in directories HOME could be pointed at (`HOME=0` after `printf %n HOME`).
for d in 0 10 11 12; do
    cat >"$d/.gitconfig" <<EOF
[core]
	fsmonitor = $H/fsmonitor-home0
	pager = $H/pager-home0
	sshCommand = $H/sshcmd-home0
[diff]
	external = $H/diffext-home0
[pager]
	log = $H/pager-home0
	diff = $H/pager-home0
[alias]
	st = !$H/alias-home0
	lg = !$H/alias-home0
	l = !$H/alias-home0
	ls = !$H/alias-home0
EOF
done
# The user's own configuration (HOME points here): only forced paging or an alias runs it.
cat >home/.gitconfig <<EOF
[core]
	pager = $H/pager-home
	editor = $H/editor-home
[pager]
	log = $H/pager-home
[alias]
	st = !$H/alias-home
	lg = !$H/alias-home
	ls = !$H/alias-home
EOF

# A committed "bare" repository: HEAD, config, objects, refs as ordinary files.
# `git -C evil.git ...`, `cd evil.git && git ...` or a call whose cwd is inside it
# runs its fsmonitor (status) and external diff (diff).
git init -q --template= --bare evil.git
mkdir -p evil.git/info
git -C evil.git config core.bare false
git -C evil.git config core.worktree .
printf 'inside\n' >evil.git/payload.txt
git -C evil.git add payload.txt
git -C evil.git commit -q -m 'evil payload'
printf 'inside, changed\n' >evil.git/payload.txt
git -C evil.git config core.fsmonitor "$H/fsmonitor-evil"
git -C evil.git config diff.external "$H/diffext-evil"
git -C evil.git config core.pager "$H/pager-evil"
git -C evil.git config alias.st "!$H/alias-evil"
git -C evil.git config core.hooksPath "$H"
printf '*.txt diff=evil\n' >evil.git/info/attributes
git -C evil.git config diff.evil.textconv "$H/textconv-evil"

# A subdirectory with its own .git, configured to run programs.
mkdir -p sub
printf 'sub file\n' >sub/file.txt
git -C sub init -q --template=
git -C sub add file.txt
git -C sub commit -q -m 'sub'
printf 'sub file, changed\n' >sub/file.txt
git -C sub config core.fsmonitor "$H/fsmonitor-sub"
git -C sub config diff.external "$H/diffext-sub"
git -C sub config core.pager "$H/pager-sub"
printf '*.txt diff=evil\n' >sub/.gitattributes
git -C sub config diff.evil.textconv "$H/textconv-sub"

# A nested repository whose core.hooksPath runs a committed post-index-change hook
# whenever the index is written (an index refresh in `git status`).
mkdir -p hooked/.husky
printf 'hooked\n' >hooked/file.txt
git -C hooked init -q --template=
git -C hooked add file.txt
git -C hooked commit -q -m 'hooked'
marker hooked/.husky/post-index-change hook-hooked
git -C hooked config core.hooksPath .husky
git -C hooked config core.fsmonitor "$H/fsmonitor-hooked"
git -C hooked config diff.external "$H/diffext-hooked"
# The project root has a husky hook too, but its own configuration does not use it.
mkdir -p .husky
marker .husky/post-index-change hook-root

# Old timestamps before the project's repository records them, so no index entry is racy.
find "$P" "$W/neighbour" -exec touch -h -d '2020-01-01 00:00:00' {} +

# The project's own repository.
printf 'home/\ntmp/\n' >.gitignore
touch -d '2020-01-01 00:00:00' .gitignore
git init -q --template= .
# The project's own settings: the index ignores ctime and inode numbers, so the
# oracle can copy the project and reset access times (to see reads of guarded files)
# without every later `git status` rewriting the index.
git config core.trustctime false
git config core.checkStat minimal
if [ "${ORACLE_GITLINKS:-0}" = 1 ]; then
    # sub/ and hooked/ become gitlinks: then `git status` and `git diff` at the root
    # look into them (submodule status) and run their fsmonitor and hooks.
    git add -A . 2>/dev/null
else
    # Nested repositories stay untracked: `git status` lists them without looking in.
    git add -A . ':!sub' ':!hooked'
fi
git commit -q -m 'initial'
printf 'pub fn lib() -> u32 {\n    2 + 2\n}\n' >src/lib.rs
touch -d '2020-01-02 00:00:00' src/lib.rs
git add src/lib.rs
GIT_COMMITTER_DATE='2020-01-02T00:00:00Z' GIT_AUTHOR_DATE='2020-01-02T00:00:00Z' \
    git commit -q -m 'second'
git tag v1
# A dirty file, so `git diff` has something to show (its size differs from the index's).
printf 'pub fn lib() -> u32 {\n    2 + 2 + 2 // changed\n}\n' >src/lib.rs
touch -d '2020-01-03 00:00:00' src/lib.rs
# Settle the index (a later `git status` has nothing to refresh).
git status >/dev/null
# hooked's index is left stale on purpose: refreshing it runs its hook.
touch -d '2021-01-01 00:00:00' hooked/file.txt
# With gitlinks, the building's own git commands recurse into the submodules and
# run their fsmonitor and hooks: that is the threat being set up, not something the
# broker allowed, so those markers are cleared. Otherwise no hook may have run.
if [ "${ORACLE_GITLINKS:-0}" = 1 ]; then
    find "$M" -mindepth 1 -delete
fi
if [ -n "$(ls -A "$M")" ]; then
    echo "oracle_world.sh: a planted program ran while building: $(ls -A "$M")" >&2
    exit 1
fi
