# Steps that time themselves, for scripts/test and scripts/checks (sourced).
#
# `step LANE NAME COMMAND...` runs COMMAND as one step of LANE and appends
# its wall time to $TENSORSHARE_STEP_TIMES (when set); `step_report` prints
# the steps recorded there as a table. Two lanes of scripts/test run side
# by side and append to the same file; each line is one short write.

# Runs COMMAND (a program or a shell function) as the step NAME of LANE;
# returns its status. Call it as a plain command, not in an `if`, `||` or
# `&&`: there bash switches `set -e` off for everything it runs, and a
# failing command inside a step's function would not end the step. The
# command runs in a subshell with `set -e` on, its status read with
# `set -e` off around it.
step() {
    local lane="$1" name="$2"
    shift 2
    printf '\n==> %s\n' "$name"
    local start="$EPOCHREALTIME" status
    set +e
    (
        set -e
        "$@"
    )
    status=$?
    set -e
    if [[ -n "${TENSORSHARE_STEP_TIMES:-}" ]]; then
        printf '%s\t%s\t%s\t%s\n' "$lane" "$(elapsed_since "$start")" "$status" "$name" \
            >>"$TENSORSHARE_STEP_TIMES"
    fi
    return "$status"
}

# Seconds, to a tenth, since START (an $EPOCHREALTIME reading).
elapsed_since() {
    local start="${1/./}" now="${EPOCHREALTIME/./}"
    local tenths=$(((now - start) / 100000))
    printf '%d.%d' $((tenths / 10)) $((tenths % 10))
}

# Prints the steps recorded in $TENSORSHARE_STEP_TIMES, in the order they
# ended, then TOTAL_LABEL with the wall time since START.
step_report() {
    local start="$1" total_label="$2"
    [[ -s "${TENSORSHARE_STEP_TIMES:-}" ]] || return 0
    printf '\nstep times (wall clock, seconds)\n'
    awk -F '\t' '{ printf "  %-7s %7.1f  %s%s\n", $1, $2, $4, ($3 == 0 ? "" : "  (FAILED, exit " $3 ")") }' \
        "$TENSORSHARE_STEP_TIMES"
    printf '  %-7s %7s  %s\n' total "$(elapsed_since "$start")" "$total_label"
}
