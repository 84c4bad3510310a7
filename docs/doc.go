// Package docs holds underlay's documentation (the pages of this
// directory, and the repository's README.md, their front door). It has no
// code: its tests check the pages against the code in make check, so that
// what they say cannot drift from what the daemon does: every relative
// link and anchor resolves, the metrics reference lists exactly the
// metrics the daemon registers, and every refusal the code can answer has
// a troubleshooting entry that quotes it. The option tables are checked
// by the packages that own them (driver/internal/config, ipam).
package docs
