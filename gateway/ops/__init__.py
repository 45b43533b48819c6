"""Operating the gateway for months: systemd integration, the unit file, doctor, backups."""
