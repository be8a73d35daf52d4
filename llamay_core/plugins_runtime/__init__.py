"""Plugin loading: the pluggy manager, the registries it fills, and lazy factories."""
