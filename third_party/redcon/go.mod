module github.com/tidwall/redcon

go 1.15

require (
	github.com/tidwall/btree v1.1.0
	github.com/tidwall/match v1.1.1
)
