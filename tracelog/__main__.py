from tracelog.cli import main

main()
