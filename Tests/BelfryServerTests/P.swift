import Testing
@Test func placeholder2() { #expect(true) }
