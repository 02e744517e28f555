// The `kiln` command. Placeholder until the CLI lands in this session.
int main() { return 0; }
