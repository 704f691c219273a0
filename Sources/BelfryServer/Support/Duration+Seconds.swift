extension Duration {
    /// The duration in seconds, as the `TimeInterval`s that sleeps and rates take.
    var inSeconds: Double {
        Double(components.seconds) + Double(components.attoseconds) / 1e18
    }
}
