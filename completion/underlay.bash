# bash completion for underlay(8).
# Generated from the flags of underlay by: go test ./cmd/underlay -run TestManPages -update-man
# Do not edit: change the flags or cmd/underlay/commands.go and regenerate.

_underlay() {
	local cur prev cmd i w lan=
	cur=${COMP_WORDS[COMP_CWORD]}
	prev=
	if ((COMP_CWORD > 0)); then prev=${COMP_WORDS[COMP_CWORD - 1]}; fi
	# --flag=VALUE: bash splits at '=' (COMP_WORDBREAKS).
	if [[ $cur == = ]]; then
		cur=
	elif [[ $prev == = ]] && ((COMP_CWORD > 1)); then
		prev=${COMP_WORDS[COMP_CWORD - 2]}
	fi
	cmd=
	for ((i = 1; i < COMP_CWORD; i++)); do
		w=${COMP_WORDS[i]}
		if [[ -z $cmd && $w != -* ]]; then cmd=$w; fi
		if [[ $cmd == doctor && ($w == --lan || $w == -lan) ]]; then lan=1; fi
	done
	COMPREPLY=()
	case $cmd:$lan in
	:)
		mapfile -t COMPREPLY < <(compgen -W 'serve ls doctor mac version help' -- "$cur")
		return
		;;
	serve:*)
		case $prev in
		-container-repair-wait | --container-repair-wait | -default-address-pool | --default-address-pool | -docker-host | --docker-host | -metrics-listen | --metrics-listen | -pool-reservation-timeout | --pool-reservation-timeout)
			return
			;;
		-log-level | --log-level)
			mapfile -t COMPREPLY < <(compgen -W 'debug info warn error' -- "$cur")
			return
			;;
		-profile | --profile | -resolv-conf | --resolv-conf | -sandbox-dir | --sandbox-dir | -socket | --socket | -state | --state)
			compopt -o filenames 2>/dev/null
			mapfile -t COMPREPLY < <(compgen -f -- "$cur")
			return
			;;
		-scope | --scope)
			mapfile -t COMPREPLY < <(compgen -W 'local global' -- "$cur")
			return
			;;
		esac
		mapfile -t COMPREPLY < <(compgen -W '--container-repair-wait --default-address-pool --docker-host --log-level --metrics-listen --pool-reservation-timeout --profile --resolv-conf --sandbox-dir --scope --socket --state' -- "$cur")
		;;
	ls:*)
		case $prev in
		-docker-host | --docker-host)
			return
			;;
		-socket | --socket)
			compopt -o filenames 2>/dev/null
			mapfile -t COMPREPLY < <(compgen -f -- "$cur")
			return
			;;
		esac
		mapfile -t COMPREPLY < <(compgen -W '--docker-host --json --socket' -- "$cur")
		;;
	doctor:)
		case $prev in
		-docker-host | --docker-host)
			return
			;;
		-socket | --socket)
			compopt -o filenames 2>/dev/null
			mapfile -t COMPREPLY < <(compgen -f -- "$cur")
			return
			;;
		esac
		mapfile -t COMPREPLY < <(compgen -W '--docker-host --json --repair --socket --lan' -- "$cur")
		;;
	doctor:1)
		case $prev in
		-lan | --lan)
			mapfile -t COMPREPLY < <(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")
			return
			;;
		-docker-host | --docker-host | -network | --network | -o | --o | -timeout | --timeout)
			return
			;;
		-socket | --socket)
			compopt -o filenames 2>/dev/null
			mapfile -t COMPREPLY < <(compgen -f -- "$cur")
			return
			;;
		esac
		mapfile -t COMPREPLY < <(compgen -W '--lan --docker-host --json --network -o --socket --timeout' -- "$cur")
		;;
	mac:*)
		case $prev in
		-parent | --parent)
			mapfile -t COMPREPLY < <(compgen -W "$(ls /sys/class/net 2>/dev/null)" -- "$cur")
			return
			;;
		-vlan | --vlan)
			return
			;;
		esac
		mapfile -t COMPREPLY < <(compgen -W '--parent --vlan' -- "$cur")
		;;
	esac
}
complete -F _underlay underlay
