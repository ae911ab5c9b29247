#!/usr/bin/env bash
# The GitHub action's logic (action.yml only wires inputs to it), runnable anywhere:
#
#   idaudit_action.sh cache-key   the Python to install into (a venv of the action's own when the
#                                 given one is externally managed, PEP 668), the pip cache
#                                 directory (empty when pip's cache is off) and a cache key
#   idaudit_action.sh install     torch, then idaudit; its scripts directory onto GITHUB_PATH —
#                                 skipped, saying so, where the idaudit on PATH is the version
#                                 it would install, with its extras and torch pin (an earlier
#                                 use of the action in the job)
#   idaudit_action.sh [audit]     idaudit audit TARGETS with JSON, JUnit and Markdown reports
#                                 and (IDAUDIT_HTML=true, where matplotlib imports) the page
#   idaudit_action.sh link        the uploaded page's link (IDAUDIT_PAGE_URL) in the summary
#
# Inputs are environment variables (all optional but IDAUDIT_TARGETS):
#   IDAUDIT_TARGETS      the paths to audit, one per line (spaces inside a path are kept;
#                        passed after --, and one beginning with - is refused)
#   IDAUDIT_MIN_R2       gate: held-out R²(h → z) ≥ this
#   IDAUDIT_ARGS         more `idaudit audit` arguments, quoted as in a shell but never expanded
#   IDAUDIT_OUTPUT_DIR   where audit.json, audit.xml (JUnit), audit.md and audit.html go
#                        (idaudit-report)
#   IDAUDIT_HTML         true: write the page audit.html too (false: none)
#   IDAUDIT_PAGE_URL, IDAUDIT_ARTIFACT_NAME  (link) the artifact's address and name
#   IDAUDIT_PYTHON       the interpreter to install into and to read JSON with (python3)
#   IDAUDIT_SPEC, IDAUDIT_EXTRAS, IDAUDIT_TORCH_SPEC, IDAUDIT_TORCH_INDEX_URL,
#   IDAUDIT_ACTION_PATH  what `install` installs (see action.yml)
#   GITHUB_STEP_SUMMARY  when set, the Markdown report (or the error) is appended to it
#   GITHUB_OUTPUT        when set, verdict, r2, exit-code and the report paths are written to it
#
# Exit: the audit's own code, unchanged (0 pass or ungated, 1 a gate failed, 2 bad input,
# 3 inconclusive, 5 a bug); the script's own refusals are 2 with one line on stderr, and a
# failure of the script itself is 5 — never 1, which means a failed gate and nothing else.
# Markdown code spans are written in single quotes on purpose:
# shellcheck disable=SC2016
set -Eeo pipefail
trap 'echo "error: internal error in idaudit_action.sh (line $LINENO)" >&2; exit 5' ERR

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PY=${IDAUDIT_PYTHON:-python3}

in_actions() { [ "${GITHUB_ACTIONS:-}" = true ]; }

summary() {  # append stdin to the job summary, when there is one
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then cat >>"$GITHUB_STEP_SUMMARY"; else cat >/dev/null; fi
}

output() {  # output NAME VALUE: a step output, when there is a GITHUB_OUTPUT
  if [ -n "${GITHUB_OUTPUT:-}" ]; then printf '%s=%s\n' "$1" "$2" >>"$GITHUB_OUTPUT"; fi
}

# Text that came from a file or a program (a target's name, a reason, idaudit's output) never
# acts as Markdown or as a workflow command: it is quoted in a fence or a code span longer than
# any run of backticks it holds, on one line where one line is shown, and a line GitHub would
# read as a workflow command (::name …::) is defused.

fence() {  # fence TEXT: a Markdown code fence (``` or longer) that TEXT cannot close
  local f='```'
  while [[ $1 == *"$f"* ]]; do f+='`'; done
  printf '%s' "$f"
}

code_span() {  # code_span TEXT: TEXT as one inline Markdown code span, control characters as ?
  local text=${1//[[:cntrl:]]/?} tick='`'
  while [[ $text == *"$tick"* ]]; do tick+='`'; done
  if [[ $text == *'`'* ]]; then text=" $text "; fi
  printf '%s%s%s' "$tick" "$text" "$tick"
}

defused() {  # stdin to stdout, each line that would be a workflow command (::…) made plain text
  sed 's/^\([[:space:]]*\)::/\1: :/'
}

command_data() {  # command_data TEXT: TEXT as a workflow command's message (%, CR, LF escaped)
  local text=${1//%/%25}
  text=${text//$'\r'/%0D}
  printf '%s' "${text//$'\n'/%0A}"
}

die() {  # die MESSAGE: one line on stderr, the error in the summary and outputs, exit 2
  trap - ERR
  local message=${1//[$'\n\r']/ } f
  echo "error: $message" >&2
  f=$(fence "$message")
  { printf '## idaudit · error (exit 2)\n\n%s\n%s\n%s\n' "$f" "$message" "$f" | summary; } \
    2>/dev/null || true
  { output verdict error && output exit-code 2; } 2>/dev/null || true
  exit 2
}

need_python() {
  command -v "$PY" >/dev/null 2>&1 || die "no Python interpreter '$PY' (set IDAUDIT_PYTHON)"
}

check_github_files() {  # the summary and output files are appendable before any work
  local name path
  for name in GITHUB_STEP_SUMMARY GITHUB_OUTPUT GITHUB_PATH; do
    path=${!name:-}
    if [ -n "$path" ] && { [ -d "$path" ] || ! : >>"$path"; } 2>/dev/null; then
      die "$name ($path) cannot be appended to"
    fi
  done
}

# The default torch-index-url: PyTorch's CPU-only builds (PyPI's Linux wheel is the CUDA build)
CPU_INDEX=https://download.pytorch.org/whl/cpu

venv_dir() {  # where the action's own venv goes (a PEP 668 Python)
  printf '%s/idaudit-venv' "${RUNNER_TEMP:-${TMPDIR:-/tmp}}"
}

externally_managed() {  # PY is a system Python that forbids pip installs (PEP 668)
  [ -z "${PIP_BREAK_SYSTEM_PACKAGES:-}" ] && "$PY" -c '
import os, sys, sysconfig
managed = os.path.exists(os.path.join(sysconfig.get_path("stdlib"), "EXTERNALLY-MANAGED"))
sys.exit(0 if managed and sys.prefix == sys.base_prefix else 1)'
}

cache_key() {  # the Python to install into, pip's cache directory, and a key for the cache
  need_python
  local dir version digest venv
  if externally_managed; then
    # a venv of the action's own, seeing the system's packages (the project's, torch if any)
    venv=$(venv_dir)
    if [ ! -x "$venv/bin/python" ]; then
      "$PY" -m venv --system-site-packages "$venv" >/dev/null 2>&1 \
        || die "$PY is externally managed (PEP 668) and '$PY -m venv' failed: install python3-venv, or set python-version"
    fi
    echo "note: $PY is externally managed (PEP 668): installing into the action's own venv $venv" >&2
    PY=$venv/bin/python
  fi
  "$PY" -m pip --version >/dev/null 2>&1 || die "no pip for $PY ('$PY -m pip --version' failed)"
  if ! dir=$("$PY" -m pip cache dir 2>/dev/null); then
    # PIP_NO_CACHE_DIR or a pip.conf turned the cache off: nothing to keep, not an error
    dir=''
    echo "note: pip's download cache is off here (PIP_NO_CACHE_DIR or pip.conf): nothing is cached" >&2
  fi
  version=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
  # what decides the wheels: the torch spec and index, the idaudit spec and extras
  digest=$("$PY" -c 'import hashlib, sys; print(hashlib.sha256("\0".join(sys.argv[1:]).encode()).hexdigest()[:16])' \
    "${IDAUDIT_TORCH_SPEC:-}" "${IDAUDIT_TORCH_INDEX_URL:-}" "${IDAUDIT_SPEC:-}" "${IDAUDIT_EXTRAS:-}")
  output pip-cache-dir "$dir"
  output key "idaudit-pip-${RUNNER_OS:-$(uname -s)}-py$version-$digest"
  output python "$(command -v "$PY")"
}

wanted() {  # wanted ROOT SPEC EXTRAS: "VERSION EXTRAS" of what `install` would install — the
  # action's checkout's own version with plot and EXTRAS, or a spec pinned as idaudit[E]==V —
  # or nothing where a spec pins no version (a Git URL, a range: only pip knows)
  local root=$1 spec=$2 extras=$3 version
  local pin='^[[:space:]]*[Ii][Dd][Aa][Uu][Dd][Ii][Tt][[:space:]]*(\[([^]]*)\])?[[:space:]]*==[[:space:]]*([^[:space:];]+)[[:space:]]*$'
  if [ -z "$spec" ]; then
    version=$(sed -n 's/^__version__ = "\(.*\)"$/\1/p' "$root/src/idaudit/core/version.py" 2>/dev/null || true)
    if [ -n "$version" ]; then printf '%s plot%s\n' "$version" "${extras:+,$extras}"; fi
  elif [[ $spec =~ $pin ]]; then
    printf '%s %s\n' "${BASH_REMATCH[3]}" "${BASH_REMATCH[2]// /}"
  fi
}

same_on_path() {  # same_on_path VERSION EXTRAS TORCH: the idaudit on PATH reports VERSION, and
  # its Python has every package of EXTRAS (comma-separated) and, where TORCH pins torch==V, that
  # torch; else (exit 1) a note on stderr says what differs
  local want=$1 extras=$2 torch=$3 exe have first py why
  exe=$(command -v idaudit 2>/dev/null) || return 1
  have=$("$exe" --version 2>/dev/null) || have=''
  if [ "$have" != "idaudit $want" ]; then
    echo "note: the idaudit on PATH ($exe) says '${have:-nothing}', not 'idaudit $want': installing" >&2
    return 1
  fi
  IFS= read -r first <"$exe" || first=''
  py=${first#\#!}
  py=${py%% *}
  if [ "$first" = "$py" ] || [ ! -x "$py" ]; then
    echo "note: idaudit $want is on PATH ($exe), but its Python cannot be told from its first line: installing" >&2
    return 1
  fi
  if ! why=$("$py" -c '
import importlib.metadata as m, re, sys
extras, torch = [e.strip() for e in sys.argv[1].split(",") if e.strip()], sys.argv[2].strip()
why = []
for req in m.requires("idaudit") or []:
    extra = re.search(r"extra\s*==\s*\"([^\"]+)\"", req)
    name = re.match(r"[A-Za-z0-9._-]+", req).group(0)
    if extra and extra.group(1) in extras:
        try:
            m.version(name)
        except m.PackageNotFoundError:
            why.append(f"{name} (extra {extra.group(1)}) is not installed")
if torch:
    pin = re.fullmatch(r"torch\s*==\s*([^\s;+]+)", torch)
    try:
        have = m.version("torch").split("+")[0]
    except m.PackageNotFoundError:
        have = None
    if pin is None:
        why.append(f"torch-spec {torch} is not a pin (torch==V) to compare with")
    elif have != pin.group(1):
        why.append(f"its torch is {have}, not {pin.group(1)}")
if why:
    sys.exit("; ".join(why))
' "$extras" "$torch" 2>&1); then
    echo "note: idaudit $want is on PATH ($exe), but ${why//[$'\n\r']/ }: installing" >&2
    return 1
  fi
}

install() {
  need_python
  local root=${IDAUDIT_ACTION_PATH:-$HERE/..} spec=${IDAUDIT_SPEC:-} extras=${IDAUDIT_EXTRAS:-}
  local torch=${IDAUDIT_TORCH_SPEC:-} index=${IDAUDIT_TORCH_INDEX_URL:-} scripts want='' asked=''
  local pip=("$PY" -m pip install --disable-pip-version-check --progress-bar off)
  if [ -n "$spec" ] && [ -n "$extras" ]; then
    die "extras apply to the action's own checkout; with idaudit-spec write them into it (idaudit[$extras]…)"
  fi
  if externally_managed; then
    die "$PY is externally managed (PEP 668): run the cache-key step first (it makes a venv), or set python-version"
  fi
  case $index in  # refused before anything is installed or skipped
    '' | *://* | pypi) ;;
    *) if [ -n "$torch" ]; then die "torch-index-url must be a URL, pypi (pip's usual index) or empty (PyTorch's CPU index), got '$index'"; fi ;;
  esac
  if [ -z "$torch" ] && [ -n "$index" ]; then
    die "torch-index-url is set but torch-spec is empty: nothing would be installed from it"
  fi
  # the same idaudit already on PATH (an earlier use of the action in this job): nothing to do
  read -r want asked < <(wanted "$root" "$spec" "$extras") || true
  if [ -n "$want" ] && same_on_path "$want" "$asked" "$torch"; then
    echo "idaudit $want is already on PATH ($(command -v idaudit)) with the extras${torch:+ and the $torch} asked for: the install is skipped"
    return 0
  fi
  if [ -z "$spec" ]; then spec=$root[plot${extras:+,$extras}]; fi  # plot: the page's figures
  if [ -n "$torch" ]; then
    case $index in
      '') "${pip[@]}" "$torch" --index-url "$CPU_INDEX" || die "pip could not install $torch from $CPU_INDEX" ;;
      pypi) "${pip[@]}" "$torch" || die "pip could not install $torch" ;;
      *) "${pip[@]}" "$torch" --index-url "$index" || die "pip could not install $torch from $index" ;;
    esac
  fi
  "${pip[@]}" "$spec" || die "pip could not install $spec"
  scripts=$("$PY" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
  if [ -n "${GITHUB_PATH:-}" ]; then printf '%s\n' "$scripts" >>"$GITHUB_PATH"; fi
  "$scripts/idaudit" --version
}

audit() {
  need_python
  local out=${IDAUDIT_OUTPUT_DIR:-idaudit-report} line arg tmp rc verdict r2 failed fenced
  local -a targets=() args=()
  case $out in *$'\n'*) die "IDAUDIT_OUTPUT_DIR holds a newline" ;; esac
  while IFS= read -r line || [ -n "$line" ]; do  # one target per line, outer blanks trimmed
    line=${line%$'\r'}
    line=${line#"${line%%[![:space:]]*}"}
    line=${line%"${line##*[![:space:]]}"}
    if [ -n "$line" ]; then targets+=("$line"); fi
  done <<<"${IDAUDIT_TARGETS:-}"
  [ "${#targets[@]}" -gt 0 ] || die "no target to audit (IDAUDIT_TARGETS, the action's targets input)"
  for line in "${targets[@]}"; do
    case $line in  # a file named like a flag (--trust-code) stays a file: refused, never read as one
      -*) die "target '$line' begins with '-' and would read as an option; name it ./$line" ;;
    esac
    [ -e "$line" ] || die "target not found: $line"
  done
  command -v idaudit >/dev/null 2>&1 || die "idaudit is not on PATH (the action's install step puts it there)"

  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  # IDAUDIT_ARGS split as a shell would, with quotes, but nothing expanded or run
  if ! "$PY" -c '
import shlex, sys
try:
    words = shlex.split(sys.argv[1])
except ValueError as exc:
    sys.exit(str(exc))
sys.stdout.write("".join(w + "\0" for w in words))
' "${IDAUDIT_ARGS:-}" >"$tmp/args" 2>"$tmp/why"; then
    die "IDAUDIT_ARGS (the action's args input): $(head -n 1 "$tmp/why")"
  fi
  mapfile -d '' -t args <"$tmp/args"
  for arg in "${args[@]}"; do
    case $arg in
      --json | --json=* | --junit | --junit=* | --markdown | --markdown=* | --html | --html=*)
        die "args: ${arg%%=*} is the action's own (the reports go to $out; choose it with output-dir)" ;;
      --) die "args: -- is the action's own (the targets follow it)" ;;
      --min-r2 | --min-r2=*)
        if [ -n "${IDAUDIT_MIN_R2:-}" ]; then die "--min-r2 is given twice: in min-r2 and in args"; fi ;;
    esac
  done
  if [ -n "${IDAUDIT_MIN_R2:-}" ]; then args+=(--min-r2 "$IDAUDIT_MIN_R2"); fi
  check_github_files

  local json=$out/audit.json junit=$out/audit.xml markdown=$out/audit.md html=$out/audit.html
  local -a page=()
  case ${IDAUDIT_HTML:-true} in
    true) if "$PY" -c 'import matplotlib' 2>/dev/null; then page=(--html "$html"); else
            echo "note: no page: matplotlib does not import here (pip install \"idaudit[plot]\")" >&2
          fi ;;
    false) ;;
    *) die "html must be true or false, got '${IDAUDIT_HTML}'" ;;
  esac
  rm -f -- "$json" "$junit" "$markdown" "$html" 2>/dev/null || die "cannot remove an earlier report in $out"
  # the targets after --, never read as options; stderr shown (defused) and kept (for the
  # summary when there is no report), then the table to stdout (defused)
  if idaudit audit "${args[@]}" --json "$json" --junit "$junit" --markdown "$markdown" \
       "${page[@]}" -- "${targets[@]}" 2>&1 >"$tmp/stdout" | tee "$tmp/stderr" | defused >&2; then
    rc=0
  else
    rc=${PIPESTATUS[0]}
  fi
  defused <"$tmp/stdout"

  verdict=error r2='' failed='' reason=''
  if [ -f "$json" ] && [ "$rc" -le 3 ]; then
    # verdict, held-out R²(h → z) as the JSON has it (empty without z), the failed gates,
    # why an audit was inconclusive (one line)
    IFS=$'\x1f' read -r verdict r2 failed reason < <("$PY" -c '
import json, sys
report = json.load(open(sys.argv[1], encoding="utf-8"))
r2 = report.get("metrics", {}).get("r2_h_to_z_heldout")
failed = [g["metric"] for g in report.get("gate") or [] if g.get("passed") is False]
reason = " ".join(str(report.get("reason") or "").split())
print(report["verdict"], "" if r2 is None else repr(r2), ", ".join(failed), reason, sep="\x1f")
' "$json")
    if [ -f "$markdown" ]; then
      { cat -- "$markdown"; printf '\n<sub>idaudit audit'
        for line in "${targets[@]}"; do printf ' %s' "$(code_span "$line")"; done
        printf ' · exit %s · reports in %s</sub>\n\n' "$rc" "$(code_span "$out")"; } | summary
    fi
  else
    line=$(sed 's/\x1b\[[0-9;]*[A-Za-z]//g' "$tmp/stderr" | tail -n 20)
    fenced=$(fence "$line")
    printf '## idaudit · error (exit %s)\n\n%s\n%s\n%s\n\n' "$rc" "$fenced" "$line" "$fenced" \
      | summary
  fi
  output verdict "$verdict"
  output r2 "$r2"
  output exit-code "$rc"
  if [ -f "$json" ]; then output json "$json"; fi
  if [ -f "$junit" ]; then output junit "$junit"; fi
  if [ -f "$markdown" ]; then output markdown "$markdown"; fi
  if [ -f "$html" ]; then output html "$html"; fi
  case $verdict in
    fail) msg="gate failed: $failed (the job summary has the table)" ;;
    inconclusive) msg="inconclusive (exit 3): $reason" ;;
    ungated) msg="no gate was given (min-r2, or --min/--max/--gate in args): the audit checked nothing" ;;
    *) msg='' ;;
  esac
  if [ -n "$msg" ]; then
    if in_actions; then
      if [ "$verdict" = fail ]; then echo "::error title=idaudit::$(command_data "$msg")"
      else echo "::warning title=idaudit::$(command_data "$msg")"; fi
    elif [ "$verdict" = ungated ] || [ "$verdict" = inconclusive ]; then
      echo "warning: $msg" >&2
    fi
  fi
  trap - ERR
  exit "$rc"
}

link() {  # the uploaded page's address, linked from the job summary
  local url=${IDAUDIT_PAGE_URL:-}
  case $url in
    https://*) ;;
    *) die "IDAUDIT_PAGE_URL must be the artifact's https:// address, got '$url'" ;;
  esac
  case $url in  # nothing that could end the link and write Markdown of its own
    *[!A-Za-z0-9._~:/?#@!\$\&\'*+,\;=%-]*) die "IDAUDIT_PAGE_URL holds a character no address holds: '$url'" ;;
  esac
  check_github_files
  printf '📄 [The audit'"'"'s page](%s): the verdict, gates, figures and every metric with its meaning (artifact %s, a zip holding audit.html)\n\n' \
    "$url" "$(code_span "${IDAUDIT_ARTIFACT_NAME:-idaudit-page}")" | summary
}

case ${1:-audit} in
  audit) audit ;;
  link) link ;;
  install) check_github_files; install ;;
  cache-key) check_github_files; cache_key ;;
  *) die "unknown mode '$1': audit, install, cache-key or link" ;;
esac
