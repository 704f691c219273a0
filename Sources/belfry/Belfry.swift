import BelfryServer

@main
enum Belfry {
    static func main() async {
        await BelfryCommand.main()
    }
}
