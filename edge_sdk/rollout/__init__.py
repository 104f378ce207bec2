"""Fleet rollout: a bundle to many devices, canary first, then in waves, each gated on its shadow
run's figures and undone on the first failure. `plan` (gates, waves, the state file), `link`
(the broker connection), `driver` (the steps). The command is `edge-sdk rollout`."""
