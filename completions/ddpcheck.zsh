#compdef ddpcheck

_ddpcheck_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _DDPCHECK_COMPLETE=complete_zsh ddpcheck)
}

compdef _ddpcheck_completion ddpcheck
