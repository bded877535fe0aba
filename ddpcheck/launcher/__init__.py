"""The launcher side: what the user's shell process does to start ranks, watch them and end them."""
