from envkit.cli.main import main

main()
