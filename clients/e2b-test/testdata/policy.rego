package agentsandbox

# The suite's policy (test/sdk.test.mjs, "the policy judges E2B's actions"):
# E2B's calls are the same actions as the REST API's, judged by the same
# deny_action rules.

deny_action contains msg if {
	input.action == "file_read"
	startswith(input.path, "secret/")
	msg := "e2b-test: agents may not read secret/"
}

deny_action contains msg if {
	input.action == "exec"
	contains(concat(" ", input.command), "forbidden-word")
	msg := "e2b-test: commands may not say forbidden-word"
}
