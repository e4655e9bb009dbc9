#!/bin/sh
# Runs one command of the execution oracle and checks what a file snapshot cannot see.
#
#   oracle_wrapper.sh REPORT SANDBOX MODE CWD SCRIPT | ARGV...
#
# SANDBOX is `full` when this runs as pid 1 of fresh user, network, mount, pid and
# UTS namespaces (unshare -rnmpfu --mount-proc), else `none`. MODE is `bash` or `dash`
# (run SCRIPT with `MODE -c`) or `argv` (exec ARGV as an agent would). Lines starting
# with `violation:` in REPORT are failures; `note:` lines are information. Only shell
# builtins run here besides the command itself, so a changed PATH cannot fool it.
report=$1
sandbox=$2
mode=$3
cwd=$4
shift 4
: >"$report" || exit 125

net() {
    net=
    for f in /proc/net/snmp /proc/net/snmp6; do
        [ -r "$f" ] || continue
        while IFS= read -r line; do net="$net$line;"; done <"$f"
    done
}

if [ "$sandbox" = full ]; then
    # Writes to the usual scratch places land on fresh tmpfs mounts, checked afterwards.
    # Never over the project itself (a checkout under /tmp): that one stays
    # unchecked, with a note.
    scratch=
    for d in /tmp /var/tmp /dev/shm; do
        [ -d "$d" ] || continue
        case $cwd/ in
            "$d"/*) echo "note: the project is under $d, which gets no tmpfs" >>"$report"; continue ;;
        esac
        if mount -t tmpfs oracle "$d" 2>/dev/null; then
            scratch="$scratch $d"
        else
            echo "note: no tmpfs on $d" >>"$report"
        fi
    done
    read -r host0 </proc/sys/kernel/hostname
    net
    net0=$net
fi

cd "$cwd" || { echo "violation: setup: cannot enter $cwd" >>"$report"; exit 125; }
case $mode in
    bash) bash -c "$1" ;;
    dash) dash -c "$1" ;;
    argv) env -- "$@" ;;
    *) echo "violation: setup: unknown mode $mode" >>"$report"; exit 125 ;;
esac </dev/null
status=$?
cd /

if [ "$sandbox" = full ]; then
    read -r host1 </proc/sys/kernel/hostname
    [ "$host0" = "$host1" ] || echo "violation: the host name changed from $host0 to $host1" >>"$report"
    net
    [ "$net0" = "$net" ] || echo "violation: network traffic (the counters of /proc/net/snmp changed; nothing leaves the namespace)" >>"$report"
    for d in $scratch; do
        for f in "$d"/* "$d"/.[!.]* "$d"/..?*; do
            if [ -e "$f" ] || [ -h "$f" ]; then
                echo "violation: created outside the project: $f" >>"$report"
            fi
        done
    done
    # Pid 1 is this script; anything else still alive outlived the command.
    # bash does not wait for the commands of a process substitution (`diff
    # <(ls a) <(ls b)`): one that ends within a second is not left behind.
    alive() {
        for p in /proc/[0-9]*; do
            [ "$p" = /proc/1 ] && continue
            read -r stat 2>/dev/null <"$p/stat" || continue
            state=${stat##*) }
            [ "${state%% *}" = Z ] && continue
            return 0
        done
        return 1
    }
    tries=0
    while alive && [ "$tries" -lt 20 ]; do
        sleep 0.05
        tries=$((tries + 1))
    done
    for p in /proc/[0-9]*; do
        [ "$p" = /proc/1 ] && continue
        [ -r "$p/stat" ] || continue
        read -r stat 2>/dev/null <"$p/stat" || continue
        state=${stat##*) }
        state=${state%% *}
        [ "$state" = Z ] && continue
        read -r comm 2>/dev/null <"$p/comm" || comm="exited meanwhile"
        echo "violation: a process outlived the command: ${p#/proc/} ($comm)" >>"$report"
    done
fi
echo "status: $status" >>"$report"
exit 0
