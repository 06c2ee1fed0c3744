"""The sandbox fleet: real SSH hosts (systemd-nspawn + netns), real apt, Docker, Triton and S3;
only the accelerator hardware is simulated. See ``fleet.py`` and README "The sandbox"."""
