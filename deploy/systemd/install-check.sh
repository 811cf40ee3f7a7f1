#!/bin/sh
# install-check.sh: checks an edge install of qinglong-dispatcher (docs/installation.md,
# "Edge: a router or NAS"): the unit file, the venv it starts, the site settings, the
# credentials, the state directory and the metrics port. It only reads: it never starts,
# stops or opens the database.
#
#   sh install-check.sh              before the first start (as root)
#   sh install-check.sh --running    once the unit runs: its database and /readyz too
#   sh install-check.sh --root DIR   the same checks on the tree under DIR instead of /
#
# Each check prints one line: "ok", "note" (nothing wrong, something to know) or "FAIL".
# Exit status: 0 when nothing failed, 1 when a check failed, 2 on a usage error.

set -u

ROOT=""
RUNNING=0
usage() {
    echo "usage: install-check.sh [--root DIR] [--running]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --root) [ $# -ge 2 ] || usage; ROOT=${2%/}; shift 2 ;;
        --running) RUNNING=1; shift ;;
        *) usage ;;
    esac
done

NAME=qinglong-dispatcher
PREFIX=/opt/qinglong-dispatcher
COMMAND=$PREFIX/bin/qinglong-dispatcher
UNIT=$ROOT/etc/systemd/system/$NAME.service
DROPINS=$ROOT/etc/systemd/system/$NAME.service.d
ENV_FILE=/etc/qinglong-dispatcher/env
WORKDIR=/var/lib/$NAME

failures=0
ok() { printf 'ok    %s\n' "$*"; }
note() { printf 'note  %s\n' "$*"; }
fail() { printf 'FAIL  %s\n' "$*"; failures=$((failures + 1)); }

# The octal mode and the owner's uid (GNU and busybox stat alike).
mode_of() { stat -c %a "$1"; }
uid_of() { stat -c %u "$1"; }
# True when the octal mode $1 has any of the bits $2 (e.g. 022: writable by group or others).
has_bits() { [ $((0$1 & $2)) -ne 0 ]; }

# A file that only root may change: what the unit, its settings and its credentials must be,
# since the daemon (and whoever could write them) would run what they say. Under --root DIR,
# "root" is whoever owns DIR (an image prepared by a build user).
ROOT_UID=$(uid_of "$ROOT/")
check_root_owned() { # path what
    if [ "$(uid_of "$1")" != "$ROOT_UID" ]; then
        fail "$2 $1 is owned by uid $(uid_of "$1"), not $ROOT_UID (root)"
    elif has_bits "$(mode_of "$1")" 022; then
        fail "$2 $1 is writable by group or others (mode $(mode_of "$1"))"
    else
        return 0
    fi
    return 1
}

# The [Service] lines of the unit and its drop-ins, in the order systemd reads them.
service_lines() {
    for file in "$UNIT" "$DROPINS"/*.conf; do
        [ -f "$file" ] || continue
        awk '/^[[:space:]]*\[/ { service = ($0 ~ /^[[:space:]]*\[Service\]/); next }
             service && /^[[:space:]]*[A-Za-z]/ { sub(/^[[:space:]]+/, ""); print }' "$file"
    done
}

# The value of a QINGLONG_* setting as the unit's process sees it: the site settings file
# overrides the unit's Environment= lines; $2 when neither sets it.
setting() {
    value=$(service_lines | sed -n "s/^Environment=\"\{0,1\}$1=\([^\"]*\)\"\{0,1\}$/\1/p" | tail -n 1)
    if [ -f "$ROOT$ENV_FILE" ] && grep -q "^[[:space:]]*$1=" "$ROOT$ENV_FILE"; then
        value=$(sed -n "s/^[[:space:]]*$1=//p" "$ROOT$ENV_FILE" | tail -n 1)
        value=${value#[\"\']}
        value=${value%[\"\']}
    fi
    printf '%s' "${value:-$2}"
}

# --- the unit file ---------------------------------------------------------------------------
if [ ! -f "$UNIT" ]; then
    fail "unit file $UNIT is missing (install -m 0644 qinglong-dispatcher.service /etc/systemd/system/)"
else
    check_root_owned "$UNIT" "unit file" && ok "unit file $UNIT"
    for key in ExecStartPre ExecStart; do
        line=$(service_lines | sed -n "s/^$key=//p" | tail -n 1)
        case "$line" in
            "$COMMAND "*) ok "$key runs $line" ;;
            *) fail "$key is '$line', not $COMMAND …" ;;
        esac
    done
    if service_lines | grep -q '^DynamicUser=yes$'; then
        ok "the unit runs as a transient user (DynamicUser=yes)"
    else
        note "DynamicUser=yes is not set: the state directory below is checked as a plain folder"
    fi
    if [ -z "$ROOT" ] && command -v systemd-analyze >/dev/null 2>&1; then
        if problems=$(systemd-analyze verify "$UNIT" 2>&1) && [ -z "$problems" ]; then
            ok "systemd-analyze verify"
        else
            fail "systemd-analyze verify: $problems"
        fi
    fi
fi

# --- the venv the unit starts ----------------------------------------------------------------
PYTHON=$ROOT$PREFIX/bin/python
if [ ! -f "$ROOT$PREFIX/pyvenv.cfg" ] || [ ! -x "$ROOT$COMMAND" ]; then
    fail "no venv with the console script at $ROOT$PREFIX (python3 -m venv $PREFIX, then pip install the lock and the wheel)"
    PYTHON=""
elif version=$("$ROOT$COMMAND" --version 2>&1); then
    check_root_owned "$ROOT$PREFIX/" "venv" && ok "$version in $ROOT$PREFIX"
else
    fail "$ROOT$COMMAND --version failed: $version"
    PYTHON=""
fi

# --- site settings ---------------------------------------------------------------------------
if [ ! -e "$ROOT$ENV_FILE" ]; then
    note "no site settings file $ROOT$ENV_FILE: the edge profile's defaults apply"
elif check_root_owned "$ROOT$ENV_FILE" "settings file"; then
    if has_bits "$(mode_of "$ROOT$ENV_FILE")" 007; then
        fail "settings file $ROOT$ENV_FILE is readable by others (mode $(mode_of "$ROOT$ENV_FILE")): install -m 0640"
    elif bad=$(grep -nvE '^[[:space:]]*(#.*)?$|^[[:space:]]*[A-Za-z_][A-Za-z0-9_]*=' "$ROOT$ENV_FILE"); then
        fail "settings file $ROOT$ENV_FILE has lines that are not NAME=VALUE: $bad"
    else
        ok "settings file $ROOT$ENV_FILE"
    fi
fi

# --- credentials -----------------------------------------------------------------------------
# Every LoadCredential=NAME:PATH names a root-owned file nobody else can read; every
# credential:NAME in the receivers and commands files has its LoadCredential=.
loaded=" "
for entry in $(service_lines | sed -n 's/^LoadCredential=//p'); do
    cred=${entry%%:*}
    source=${entry#*:}
    loaded="$loaded$cred "
    if [ "$cred" = "$entry" ] || [ ! -e "$ROOT$source" ]; then
        fail "credential $cred: the file $ROOT$source is missing"
    elif check_root_owned "$ROOT$source" "credential $cred:"; then
        if has_bits "$(mode_of "$ROOT$source")" 077; then
            fail "credential $cred: $ROOT$source is readable by group or others (mode $(mode_of "$ROOT$source")): chmod 0600"
        else
            ok "credential $cred from $source"
        fi
    fi
done
for variable in QINGLONG_RECEIVERS_FILE QINGLONG_COMMANDS_FILE; do
    file=$(setting "$variable" "")
    [ -n "$file" ] || continue
    if [ ! -f "$ROOT$file" ]; then
        fail "$variable names $file, which is missing"
        continue
    fi
    check_root_owned "$ROOT$file" "$variable:" && ok "$variable $file"
    # shellcheck disable=SC2013 # credential names hold no spaces; a while loop would lose failures
    for cred in $(grep -o 'credential:[A-Za-z0-9_.-]*' "$ROOT$file" | sed 's/^credential://' | sort -u); do
        case "$loaded" in
            *" $cred "*) ok "$file: credential:$cred is loaded" ;;
            *) fail "$file names credential:$cred, but no LoadCredential=$cred:… (a drop-in: command-run.conf.example)" ;;
        esac
    done
done
if [ "$loaded" = " " ]; then
    note "no LoadCredential= lines: no credential to check"
fi

# --- the state directory and the database ----------------------------------------------------
url=$(setting QINGLONG_DATABASE_URL "sqlite:///qinglong.db")
case "$url" in
    sqlite:////*) database=${url#sqlite:///} ;;
    sqlite:///*) database=$WORKDIR/${url#sqlite:///} ;;
    *) database=""; fail "QINGLONG_DATABASE_URL is not a sqlite:/// URL: the edge unit runs one SQLite file" ;;
esac
state=$ROOT$WORKDIR
if [ ! -e "$state" ]; then
    if [ "$RUNNING" = 1 ]; then
        fail "state directory $state is missing: the unit has not started (systemctl status $NAME)"
    else
        note "state directory $state does not exist yet: systemd creates it at the first start"
    fi
else
    if [ -L "$state" ]; then
        target=$(readlink "$state")
        if [ "$target" = "private/$NAME" ]; then
            ok "state directory $state -> $target (DynamicUser)"
        else
            fail "state directory $state links to $target, not private/$NAME"
        fi
        if has_bits "$(mode_of "$ROOT/var/lib/private")" 077; then
            fail "$ROOT/var/lib/private is open to others (mode $(mode_of "$ROOT/var/lib/private")), systemd keeps it 0700"
        fi
    fi
    owner=$(uid_of "$state/")
    if has_bits "$(mode_of "$state/")" 077; then
        fail "state directory $state is open to group or others (mode $(mode_of "$state/")), StateDirectoryMode=0700"
    else
        ok "state directory $state, uid $owner, mode $(mode_of "$state/")"
    fi
    if [ -n "$database" ] && [ -f "$ROOT$database" ]; then
        for file in "$ROOT$database" "$ROOT$database-wal" "$ROOT$database-shm"; do
            [ -e "$file" ] || continue
            if [ "$(uid_of "$file")" != "$owner" ]; then
                fail "$file is owned by uid $(uid_of "$file"), the state directory by $owner: a command run as another user left it (docs/installation.md, \"Commands against the unit's database\")"
            elif has_bits "$(mode_of "$file")" 077; then
                fail "$file is readable by group or others (mode $(mode_of "$file"))"
            else
                ok "$file, mode $(mode_of "$file")"
            fi
        done
    elif [ "$RUNNING" = 1 ]; then
        fail "database $ROOT$database is missing, though the unit should be running"
    else
        note "database $ROOT$database does not exist yet: the unit's ExecStartPre migrate creates it"
    fi
    sandbox=$(setting QINGLONG_TOOL_SANDBOX_DIR "")
    if [ -n "$sandbox" ] && [ ! -d "$ROOT$sandbox" ] && [ "$RUNNING" = 1 ]; then
        fail "tool sandbox $ROOT$sandbox is missing (StateDirectory= creates it)"
    fi
fi

# --- the metrics and health port -------------------------------------------------------------
host=$(setting QINGLONG_METRICS_HOST 127.0.0.1)
port=$(setting QINGLONG_METRICS_PORT 9464)
case "$host" in
    127.*|localhost|::1) ;;
    *) note "metrics listen on $host: /metrics has no authentication, so firewall port $port" ;;
esac
case "$host" in
    0.0.0.0|"") probe_host=127.0.0.1 ;;
    ::) probe_host=::1 ;;
    *) probe_host=$host ;;
esac
if [ -n "$PYTHON" ]; then
    # "<status> <server>", "refused", or "error <reason>" for GET /readyz.
    answer=$("$PYTHON" - "$probe_host" "$port" <<'EOF'
import sys
import urllib.error
import urllib.request

host, port = sys.argv[1], sys.argv[2]
url = f"http://[{host}]:{port}/readyz" if ":" in host else f"http://{host}:{port}/readyz"
try:
    with urllib.request.urlopen(url, timeout=3) as response:
        print(response.status, (response.headers.get("Server") or "-").split()[0])
except urllib.error.HTTPError as error:
    print(error.code, (error.headers.get("Server") or "-").split()[0])
except urllib.error.URLError as error:
    refused = isinstance(error.reason, ConnectionRefusedError)
    print("refused" if refused else f"error {error.reason}")
except OSError as error:
    print(f"error {error}")
EOF
)
    case "$answer" in
        "200 $NAME")
            ok "$host:$port/readyz answers 200: the daemon is ready" ;;
        "refused")
            if [ "$RUNNING" = 1 ]; then
                fail "nothing listens on $probe_host:$port: the unit is not running (journalctl -u $NAME)"
            else
                ok "port $probe_host:$port is free"
            fi ;;
        *" $NAME")
            if [ "$RUNNING" = 1 ]; then
                fail "$host:$port/readyz answers ${answer%% *}: not ready (its body says why: curl $probe_host:$port/readyz)"
            else
                note "a qinglong-dispatcher already answers on $probe_host:$port (${answer%% *})"
            fi ;;
        *)
            fail "port $probe_host:$port is taken by another program ($answer): set QINGLONG_METRICS_PORT in $ENV_FILE" ;;
    esac
fi

if [ "$failures" -gt 0 ]; then
    echo "$failures check(s) failed"
    exit 1
fi
echo "all checks passed"
