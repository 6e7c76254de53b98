# bash completion for nvmet-rebind(8)
# Install as $(PREFIX)/share/bash-completion/completions/nvmet-rebind.

_nvmet_rebind() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null 2>&1; then
        _init_completion || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}
        prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}")
        cword=$COMP_CWORD
    fi

    local commands="run reload config status check plan trigger rebind version help"
    local global_opts="--config --configfs-root --sysfs-root --state-dir --run-dir --log-level --help -h --version -v"

    # Values of the options that take one.
    case $prev in
        --config)
            COMPREPLY=($(compgen -f -- "$cur"))
            return ;;
        --configfs-root|--sysfs-root|--state-dir|--run-dir)
            COMPREPLY=($(compgen -d -- "$cur"))
            return ;;
        --log-level)
            COMPREPLY=($(compgen -W "debug info warn error" -- "$cur"))
            return ;;
        --metrics-listen)
            COMPREPLY=($(compgen -W "127.0.0.1:9767 [::1]:9767" -- "$cur"))
            return ;;
        -o|--output)
            COMPREPLY=($(compgen -W "wide json" -- "$cur"))
            return ;;
        --metrics-textfile)
            COMPREPLY=($(compgen -f -X '!*.prom' -- "$cur") $(compgen -d -- "$cur"))
            return ;;
    esac

    # The command is the first word that is neither an option nor the value
    # of a global option.
    local i cmd=""
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            --config|--configfs-root|--sysfs-root|--state-dir|--run-dir|--log-level)
                ((i++)) ;;
            -*) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done

    case $cmd in
        "")
            if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$global_opts" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "$commands" -- "$cur"))
            fi ;;
        run)    COMPREPLY=($(compgen -W "--dry-run --metrics-listen --metrics-textfile --no-watch --help" -- "$cur")) ;;
        status) COMPREPLY=($(compgen -W "--json --output -o --help" -- "$cur")) ;;
        config)
            if [[ " ${words[*]:i+1:cword-i-1} " == *" check "* ]]; then
                COMPREPLY=($(compgen -W "--config --help" -- "$cur"))
            else
                COMPREPLY=($(compgen -W "check --help" -- "$cur"))
            fi ;;
        help)   COMPREPLY=($(compgen -W "$commands" -- "$cur")) ;;
        *)      COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
    esac
}

complete -F _nvmet_rebind nvmet-rebind
