"""The rank side: what runs in every rank, from joining the group to handing rank 0's report back;
and what the launcher shares with it (signals, the address on the route, torch's C++ log level)."""
