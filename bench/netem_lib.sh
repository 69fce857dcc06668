# netem_lib.sh: the argument and environment checks that bench/netem.sh and bench/netem_hosts.sh
# share.  Sourced (POSIX sh); each check exits the calling script ($0 in its messages).

# netem_need_args COUNT MIN USAGE: at least MIN arguments, else the usage line and exit 2.
netem_need_args() {
    if [ "$1" -lt "$2" ]; then
        echo "usage: $0 $3" >&2
        exit 2
    fi
}

# netem_need_root: root (ip netns, tc), else exit 1.
netem_need_root() {
    if [ "$(id -u)" != 0 ]; then
        echo "$0: needs root (ip netns, tc); refusing to run" >&2
        exit 1
    fi
}

# netem_need_tools TOOL...: each one on PATH, else exit 1.
netem_need_tools() {
    for tool in "$@"; do
        if ! command -v "$tool" > /dev/null 2>&1; then
            hint=""
            case "$tool" in ip | tc) hint=" (Debian: apt-get install iproute2)" ;; esac
            echo "$0: '$tool' not found$hint; refusing to run" >&2
            exit 1
        fi
    done
}

# netem_check_rate RATE: a tc rate such as 1gbit or 10gbit, else exit 2.
netem_check_rate() {
    case "$1" in
        *[!0-9a-zA-Z.]* | "") echo "$0: bad rate '$1'" >&2; exit 2 ;;
    esac
}
