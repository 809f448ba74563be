"""Plans and run creation: the plan frozen before any model call, its fixed parameters, what can run
on this machine, and the services that create, dispatch and cancel runs."""
