# Sourced by the tiers that run Node packages: one way to install them.
#
#   ensure_npm_packages NAME PREFIX PACKAGES FILE...
#
# Installs PACKAGES (one `name@version` a line) into PREFIX with npm, when a
# FILE (a path under PREFIX/node_modules) is missing or the list changed
# since the last install. NAME starts the lines it prints.
ensure_npm_packages() {
    local name="$1" prefix="$2" packages="$3"
    shift 3
    local stamp="$prefix/.npm-stamp" want file fresh=1
    want="$(printf '%s' "$packages" | sha256sum | cut -d' ' -f1)"
    for file in "$@"; do
        [[ -e "$prefix/node_modules/$file" ]] || fresh=0
    done
    [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] || fresh=0
    ((fresh)) && return 0
    command -v npm >/dev/null 2>&1 || { echo "$name: npm not found" >&2; return 1; }
    echo "$name: installing npm packages into $prefix" >&2
    mkdir -p "$prefix"
    # shellcheck disable=SC2086
    npm install --prefix "$prefix" --no-audit --no-fund --save-exact --loglevel=error \
        $(printf '%s ' $packages)
    printf '%s' "$want" >"$stamp"
}
